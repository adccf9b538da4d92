"""Pausing for urgent work: a table of cases for the pure rule, and the rule held equal to
the dispatch script's on random pool states (real Lua, real Redis-protocol servers),
with the slot accounting checked after every pause."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from scheduler.policy.preemption import (
    PauseRule,
    Running,
    Slots,
    Urgent,
    budget_now,
    candidate_after,
    decide,
    is_candidate,
    remaining,
    resume_cost_s,
)
from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import PauseMessage, pack_lease, parse_budget, parse_lease, parse_ticket
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Lease, MessageKind, ResumeCost, Ticket

QUANTUM, MAX_PAUSES, SLACK = 64, 2, 30.0
SHORT = Urgent("short", "interactive", 100.0, arrival=100.0, predicted=20)
MEDIUM = Urgent("medium", "interactive", 108.0, arrival=100.0, predicted=400)


def r(lease: str, attained: int = 500, pauses: int = 0, score: float = 200.0, backend: str = "a",
      tier: str = "interactive", arrival: float = 90.0, predicted: int = 1000, prompt: int = 100) -> Running:
    return Running(lease, backend, attained, pauses, score, tier, arrival, predicted, prompt)


RULE = PauseRule(QUANTUM, MAX_PAUSES, SLACK, ratio=2.0, backlog=1.0)  # every rule on
FREE = {"a": Slots(busy=2, limit=2)}  # default costs: 50 ms a token, 2.5 ms a prompt token


@pytest.mark.parametrize(
    ("case", "urgent", "running", "expected"),
    [
        ("the one that ran longest", SHORT, [r("x", 300), r("y", 900), r("z", 600)], "y"),
        ("not within its quantum", SHORT, [r("x", QUANTUM)], None),
        ("not paused too often", SHORT, [r("x", 900, pauses=MAX_PAUSES), r("y", 100)], "y"),
        ("the starvation bound: not one that arrived over max_slack before", SHORT, [r("x", 900, arrival=69.0)], None),
        ("...at max_slack it still may", SHORT, [r("x", 900, arrival=70.0)], "x"),
        ("a mispredicted short lease, once it has shown it is long, is paused too", SHORT,
         [r("x", 90, score=95.0, predicted=20)], "x"),
        ("...but not a short one still within twice the urgent one's length", SHORT,
         [r("x", 70, score=95.0, predicted=20)], None),
        ("not on a backend that cannot take it", SHORT, [r("x", 900, backend="b")], None),
        ("medium work pauses too (least attained service)", MEDIUM,
         [r("x", 450, predicted=3000), r("y", 65, predicted=3000)], "x"),
        ("...not one expected to end before twice its own length", MEDIUM, [r("x", 450, predicted=900)], None),
        ("long work never", Urgent("long", "interactive", 130.0, arrival=100.0), [r("x", 900, score=200.0)], None),
        ("another tier: only a worse one", SHORT, [r("x", 900, tier="batch", score=160.0)], "x"),
        ("...never a better one", Urgent("short", "batch", 160.0, arrival=100.0), [r("x", 900, score=100.0)], None),
        ("a continuation never pauses", Urgent("short", "interactive", 100.0, arrival=100.0, pauses=1), [r("x")], None),
        ("nothing running", SHORT, [], None),
        ("not when a slot frees soon anyway (a lease about to end)", SHORT,
         [r("x", 900), r("y", -1, predicted=4)], None),
    ],
)
def test_pick_victim(case: str, urgent: Urgent, running: list[Running], expected: str | None) -> None:
    victim = decide(urgent, running, FREE, 1, RULE).victim
    assert (victim.lease if victim else None) == expected, case


@pytest.mark.parametrize(
    ("case", "running", "pool", "queued", "reason"),
    [
        ("a pause that pays", [r("x", 900)], FREE, 1, "pause"),
        ("nothing past its quantum", [r("x", 10)], FREE, 1, "none"),
        ("a queue longer than the slots: no extra work", [r("x", 900)], FREE, 3, "backlog"),
        ("...at as many as the slots, still", [r("x", 900)], FREE, 2, "pause"),
        ("a victim far past its prediction is expected to run on", [r("x", 900, predicted=20)], FREE, 1, "pause"),
        ("a victim expected to end sooner than twice the urgent one", [r("x", 70, predicted=100)], FREE, 1,
         "short"),
        # wait for the first slot: (1000 - 900) * 50 ms = 5 s; a re-read of 30,000 + 900 tokens
        # at 2.5 ms is 77 s, times 2 streams
        ("a re-read that costs more than the wait", [r("x", 900, prompt=30_000)], FREE, 1, "cost"),
        ("...unless the prefix cache holds most of it", [r("x", 900, prompt=30_000)],
         {"a": Slots(2, 2, ResumeCost(0.05, 0.0025, 0.999, 16))}, 1, "pause"),
        ("a prefill a hundred times cheaper pays", [r("x", 900, prompt=30_000)],
         {"a": Slots(2, 2, ResumeCost(0.05, 0.000025, 0.0, 16))}, 1, "pause"),
        ("a spent budget", [r("x", 900)], {"a": Slots(2, 2, budget_s=0.01)}, 1, "budget"),
        ("the furthest refusal is told", [r("x", 900, prompt=30_000), r("y", 70, predicted=100)], FREE, 1, "cost"),
    ],
)
def test_why(case: str, running: list[Running], pool: dict[str, Slots], queued: int, reason: str) -> None:
    d = decide(SHORT, running, pool, queued, RULE)
    assert d.reason == reason, case
    assert (d.victim is not None) == (reason == "pause"), case
    if d.victim is not None:
        assert d.wait_s >= d.cost_s * pool[d.victim.backend].busy, case


@pytest.mark.parametrize(("case", "predicted", "attained", "expected"), [
    ("not reported: its prediction", 300, -1, 300.0),
    ("within its prediction: what is left of it", 300, 100, 200.0),
    ("past it: half of what it made", 300, 500, 250.0),
    ("never below half of what it made", 300, 280, 140.0),
])
def test_remaining(case: str, predicted: int, attained: int, expected: float) -> None:
    assert remaining(predicted, attained) == expected, case


def test_the_backlog_and_worth_it_rules_are_on_by_default_and_zero_turns_them_off() -> None:
    assert decide(SHORT, [r("x", 900)], FREE, 50, PauseRule()).reason == "backlog"
    assert decide(SHORT, [r("x", 70, predicted=100)], FREE, 1, PauseRule()).reason == "short"
    off = PauseRule(ratio=0.0, backlog=0.0)
    assert decide(SHORT, [r("x", 900)], FREE, 50, off).reason == "pause"  # a queue of any length
    assert decide(SHORT, [r("x", 70, predicted=100)], FREE, 1, off).reason == "pause"  # any expected rest


def test_the_budget_refills_at_its_share_up_to_its_window() -> None:
    rule = PauseRule(budget=0.1, window_s=30.0)
    assert budget_now(None, 0.0, 5.0, rule) == pytest.approx(3.0)  # never spent: full
    assert budget_now(0.5, 10.0, 15.0, rule) == pytest.approx(1.0)  # 5 s later: +0.5 s
    assert budget_now(0.5, 10.0, 1000.0, rule) == pytest.approx(3.0)  # never past its window


def test_a_resume_costs_what_the_cache_does_not_hold() -> None:
    cost = ResumeCost(tpot_s=0.01, prefill_s=0.001, hit=0.5, block=128)
    # 300 + 100 tokens: 3 full blocks (384), half of them expected cached: 400 - 192 = 208 computed
    assert resume_cost_s(r("x", 100, prompt=300), cost) == pytest.approx(0.208)
    assert resume_cost_s(r("x", 100, prompt=300), ResumeCost(0.01, 0.001, 0.0, 128)) == pytest.approx(0.4)
    # and one prefill's overhead, whatever its length
    assert resume_cost_s(r("x", 100, prompt=300), ResumeCost(0.01, 0.001, 0.0, 128, 0.015)) == pytest.approx(0.415)


@pytest.mark.parametrize(("case", "tokens", "at_start", "quantum", "after", "candidate"), [
    ("a fresh generation within its quantum", 10, 0, QUANTUM, QUANTUM, False),
    ("at its quantum: not yet", QUANTUM, 0, QUANTUM, QUANTUM, False),
    ("one token past it", QUANTUM + 1, 0, QUANTUM, QUANTUM, True),
    ("a resumed part counts from where it resumed", 300, 250, QUANTUM, 250 + QUANTUM, False),
    ("...and is a candidate a quantum later", 315, 250, QUANTUM, 250 + QUANTUM, True),
    ("a quantum of 0: any token at all", 1, 0, 0, 0, True),
    ("...but not before the first", 0, 0, 0, 0, False),
])
def test_the_quantum(case: str, tokens: int, at_start: int, quantum: int, after: int, candidate: bool) -> None:
    assert candidate_after(at_start, quantum) == after, case
    assert is_candidate(tokens, at_start, quantum) is candidate, case


# -- the twin: the same answer as the dispatch script ----------------------------------

COSTS = {  # values a record writes exactly
    "cheap": ResumeCost(0.05, 0.00025, 0.5, 16), "dear": ResumeCost(0.01, 0.001, 0.0, 128, 0.5),
    "default": ResumeCost(),
}

lease_st = st.fixed_dictionaries({
    "backend": st.sampled_from(["a", "b", "c"]), "attained": st.sampled_from([-1, 0, 64, 65, 300, 2000, 2000, 2000]),
    "pauses": st.sampled_from([0, 0, 0, 1, 2, 3]), "score_gap": st.sampled_from([-5.0, 0.0, 0.5, 40.0]),
    "tier": st.sampled_from(["interactive", "batch"]), "age": st.sampled_from([0.0, 1.0, 29.0, 31.0, 100.0]),
    "predicted": st.sampled_from([20, 400, 3000, 3000]), "prompt": st.sampled_from([0, 100, 5000]),
})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    leases=st.lists(lease_st, min_size=2, max_size=8), cls=st.sampled_from(["short", "short", "medium", "long"]),
    resume=st.sets(st.sampled_from(["a", "b", "c"]), min_size=2),
    serves=st.sets(st.sampled_from(["a", "b", "c"]), min_size=2),
    predicted=st.sampled_from([10, 10, 200, 1500]), costs=st.lists(st.sampled_from(sorted(COSTS)), min_size=3, max_size=3),
    waiting=st.sampled_from([0, 0, 0, 0, 2, 20]), budget=st.sampled_from([0.1, 0.1, 0.00001]),
    ratio=st.sampled_from([0.0, 2.0]), backlog=st.sampled_from([0.0, 1.0]),
)
async def test_the_twin_pauses_as_the_script_does(
    redis: Redis, leases: list[dict], cls: str, resume: set[str], serves: set[str], predicted: int,
    costs: list[str], waiting: int, budget: float, ratio: float, backlog: float,
) -> None:
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    rule = PauseRule(QUANTUM, MAX_PAUSES, SLACK, ratio=ratio, backlog=backlog, budget=budget)
    scripts = Scripts(redis, Timing(30.0, 30.0, 64, max_slack_s=SLACK, preempt=True, quantum_tokens=QUANTUM,
                                    max_pauses=MAX_PAUSES, pause_ratio=ratio, pause_backlog=backlog,
                                    pause_budget=budget))
    cost_of = dict(zip(("a", "b", "c"), (COSTS[c] for c in costs), strict=True))
    held = {name: sum(1 for le in leases if le["backend"] == name) for name in ("a", "b", "c")}
    for name in ("a", "b", "c"):  # every slot of every backend held by the leases below
        models = ("m",) if name in serves else ("other",)
        await scripts.set_backend(
            keys, "me", BackendRecord(name, held[name], models=models, resume=name in resume, cost=cost_of[name])
        )
    for i in range(waiting):  # long work no backend serves: it only lengthens the queue
        await scripts.enqueue(keys, "me", Ticket(f"w{i}", "nobody", "tenant", "long", 9, 0.0, "interactive", 1.0),
                              0, 0)
    seconds, micros = await redis.time()
    now = seconds + micros / 1e6
    running, records, progress = [], {}, {}
    for i, le in enumerate(leases):
        lid = f"l{i}"
        score = now + 1.0 + le["score_gap"]  # the urgent ticket's score is now + 1.0 (its slack)
        arrival = now - le["age"]
        records[lid] = pack_lease(
            Lease(le["backend"], "me", le["predicted"], False, False, "long", score, le["pauses"], le["tier"], arrival)
        )
        if le["attained"] >= 0:
            progress[lid] = (le["attained"], le["prompt"])
        prompt = le["prompt"] if le["attained"] >= 0 else 0
        running.append(Running(lid, le["backend"], le["attained"], le["pauses"], score, le["tier"], arrival,
                               le["predicted"], prompt))
    await scripts.heartbeat(keys, "me", records, progress=progress)  # recreates every lease with its slot
    urgent = Ticket("u", "m", "tenant", cls, predicted, 0.0, "interactive", 1.0)
    result = await scripts.enqueue(keys, "me", urgent, 0, 0)

    ticket_score = float((await redis.zscore(keys.queue, "u")) or 0) or None
    paused = [m for m in result.messages if m.kind is MessageKind.PAUSE]
    granted = [m for m in result.messages if m.kind is MessageKind.GRANT and m.ticket == "u"]
    # the twin, asked with the urgent ticket's real score (Redis's clock when it was queued)
    lease = await redis.hget(keys.lease, "u")
    if lease:
        urgent_lease = parse_lease(lease)
        score, arrival = urgent_lease.score, urgent_lease.arrival
    else:
        score, arrival = ticket_score, parse_ticket(await redis.hget(keys.tickets, "u")).arrival
    pool = {
        name: Slots(held[name], held[name], cost_of[name], budget_now(None, 0.0, 0.0, rule))
        for name in serves & resume
    }
    twin = decide(Urgent(cls, "interactive", score, arrival, predicted), running, pool, waiting + 1, rule)
    event(twin.reason)
    stats = {k.decode(): int(v) for k, v in (await redis.hgetall(keys.stats)).items()}
    if twin.victim is None:
        assert paused == [] and granted == []
        tried = cls != "long"  # the script asks only for fresh short and medium work
        expected = {f"unpaused_{twin.reason}": 1} if tried else {}
        assert {k: v for k, v in stats.items() if k.startswith("unpaused_")} == expected
    else:
        assert len(paused) == 1 and len(granted) == 1
        lua = next(x for x in running if x.lease == paused[0].ticket)
        assert lua.attained == twin.victim.attained
        assert granted[0].detail == paused[0].detail == lua.backend  # the slot changed hands
        assert isinstance(paused[0], PauseMessage) and paused[0].reason.startswith("wait=")
        # the pause spent its cost from the backend's budget
        level, _ = parse_budget(await redis.hget(keys.budget, lua.backend))
        assert level == pytest.approx(budget_now(None, 0, 0, rule) - resume_cost_s(lua, cost_of[lua.backend]), abs=1e-5)
    # a slot is never held twice: each backend's busy count is the leases it holds
    for name in ("a", "b", "c"):
        holders = [lid for lid, rec in (await redis.hgetall(keys.lease)).items() if parse_lease(rec).backend == name]
        assert await readback.busy(redis, keys, name) == len(holders)


# -- the books, over random runs of arrivals, releases and heartbeats ------------------

MAX_SLACK = 0.5


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(["short", "long", "release", "beat", "beat"]), min_size=1, max_size=25))
@example(steps=["long", "long", "beat", "short", "beat", "short", "beat", "short", "release"])
async def test_pausing_keeps_the_books(redis: Redis, steps: list[str]) -> None:
    """A slot is never held twice; a pause only ever favours a more urgent ticket that did
    not arrive more than max_slack after its victim; max_pauses holds; and every paused
    request, queued again as its owner does, is granted in the end (none lost)."""
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    scripts = Scripts(redis, Timing(30.0, 30.0, 64, max_slack_s=MAX_SLACK, preempt=True, quantum_tokens=0,
                                    max_pauses=MAX_PAUSES))
    await scripts.set_backend(keys, "me", BackendRecord("a", 2, models=("m",), resume=True))
    running: dict[str, int] = {}  # lease -> attained tokens
    arrival: dict[str, float] = {}  # request -> its arrival on Redis's clock
    pauses: dict[str, int] = {}
    requests: set[str] = set()
    granted: set[str] = set()

    async def clock() -> float:
        seconds, micros = await redis.time()
        return seconds + micros / 1e6

    def request_of(ticket: str) -> str:
        return ticket.split("~")[0]

    async def handle(messages: list) -> None:
        for m in messages:
            if m.kind is MessageKind.GRANT:
                assert m.ticket not in running
                running[m.ticket] = 0
                granted.add(request_of(m.ticket))
            elif m.kind is MessageKind.PAUSE:
                victim = request_of(m.ticket)
                assert running.pop(m.ticket) > 0 and pauses[victim] < MAX_PAUSES
                pauses[victim] += 1
                granted.discard(victim)
                # the owner queues the continuation with the original arrival
                age = await clock() - arrival[victim]
                t = Ticket(f"{victim}~{pauses[victim]}", "m", "x", "long", 1000, 0.0, "interactive", MAX_SLACK,
                           age_s=age, pauses=pauses[victim])
                await handle((await scripts.enqueue(keys, "me", t, 0, 0)).messages)

    for i, step in enumerate(steps):
        if step in ("short", "long"):
            rid = f"r{i}"
            requests.add(rid)
            pauses[rid] = 0
            arrival[rid] = await clock()
            slack = 0.0 if step == "short" else MAX_SLACK
            t = Ticket(rid, "m", "x", step, 10 if step == "short" else 1000, 0.0, "interactive", slack)
            before = set(running)
            result = await scripts.enqueue(keys, "me", t, 0, 0)
            await handle(result.messages)
            for m in result.messages:
                if m.kind is MessageKind.PAUSE:  # the urgent one arrived within max_slack of its victim
                    assert arrival[rid] <= arrival[request_of(m.ticket)] + MAX_SLACK + 0.01
                    assert m.ticket in before
        elif step == "release" and running:
            lease = sorted(running)[0]
            del running[lease]
            await handle(await scripts.release(keys, "me", lease))
        elif step == "beat":
            for lease in running:
                running[lease] += 50
            records = {lid: (await redis.hget(keys.lease, lid)).decode() for lid in running}
            await handle((await scripts.heartbeat(keys, "me", records, progress={k: (n, 0) for k, n in running.items()}))[2])
        leases = await redis.hgetall(keys.lease)
        assert set(k.decode() for k in leases) == set(running)  # a slot is never held twice
        assert await readback.busy(redis, keys, "a") == len(running) <= 2
    while running:  # drain: every request ends granted, none lost
        lease = sorted(running)[0]
        del running[lease]
        await handle(await scripts.release(keys, "me", lease))
    assert granted == requests and await redis.zcard(keys.queue) == 0
    if steps[:4] == ["long", "long", "beat", "short"]:  # the mechanism ran: a long one was paused
        assert sum(pauses.values()) >= 1
