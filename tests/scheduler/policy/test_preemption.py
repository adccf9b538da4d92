"""Pausing for urgent work: a table of cases for the pure rule, and the rule held equal to
the dispatch script's on random pool states (real Lua, real Redis-protocol servers),
with the slot accounting checked after every pause."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from scheduler.policy.preemption import Running, Urgent, candidate_after, is_candidate, pick_victim
from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import pack_lease, parse_lease, parse_ticket
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Lease, MessageKind, Ticket

QUANTUM, MAX_PAUSES, SLACK = 64, 2, 30.0
SHORT = Urgent("short", "interactive", 100.0, arrival=100.0, predicted=20)
MEDIUM = Urgent("medium", "interactive", 108.0, arrival=100.0, predicted=400)


def r(lease: str, attained: int = 500, pauses: int = 0, score: float = 200.0, backend: str = "a",
      tier: str = "interactive", arrival: float = 90.0) -> Running:
    return Running(lease, backend, attained, pauses, score, tier, arrival)


@pytest.mark.parametrize(
    ("case", "urgent", "running", "expected"),
    [
        ("the one that ran longest", SHORT, [r("x", 300), r("y", 900), r("z", 600)], "y"),
        ("not within its quantum", SHORT, [r("x", QUANTUM)], None),
        ("not paused too often", SHORT, [r("x", 900, pauses=MAX_PAUSES), r("y", 100)], "y"),
        ("the starvation bound: not one that arrived over max_slack before", SHORT, [r("x", 900, arrival=69.0)], None),
        ("...at max_slack it still may", SHORT, [r("x", 900, arrival=70.0)], "x"),
        ("a mispredicted short lease, past its quantum, is paused too", SHORT, [r("x", 90, score=95.0)], "x"),
        ("not on a backend that cannot take it", SHORT, [r("x", 900, backend="b")], None),
        ("medium work pauses too (least attained service)", MEDIUM, [r("x", 450), r("y", 65)], "x"),
        ("long work never", Urgent("long", "interactive", 130.0, arrival=100.0), [r("x", 900, score=200.0)], None),
        ("another tier: only a worse one", SHORT, [r("x", 900, tier="batch", score=160.0)], "x"),
        ("...never a better one", Urgent("short", "batch", 160.0, arrival=100.0), [r("x", 900, score=100.0)], None),
        ("a continuation never pauses", Urgent("short", "interactive", 100.0, arrival=100.0, pauses=1), [r("x")], None),
        ("nothing running", SHORT, [], None),
    ],
)
def test_pick_victim(case: str, urgent: Urgent, running: list[Running], expected: str | None) -> None:
    victim = pick_victim(urgent, running, {"a"}, QUANTUM, MAX_PAUSES, SLACK)
    assert (victim.lease if victim else None) == expected, case


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



lease_st = st.fixed_dictionaries({
    "backend": st.sampled_from(["a", "b", "c"]), "attained": st.sampled_from([-1, 0, 64, 65, 300, 2000]),
    "pauses": st.integers(0, 3), "score_gap": st.sampled_from([-5.0, 0.0, 0.5, 40.0]),
    "tier": st.sampled_from(["interactive", "batch"]), "age": st.sampled_from([0.0, 1.0, 29.0, 31.0, 100.0]),
})


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    leases=st.lists(lease_st, max_size=6), cls=st.sampled_from(["short", "medium", "long"]),
    resume=st.sets(st.sampled_from(["a", "b", "c"])), serves=st.sets(st.sampled_from(["a", "b", "c"]), min_size=1),
    predicted=st.sampled_from([10, 200, 1500]),
)
async def test_the_twin_pauses_as_the_script_does(
    redis: Redis, leases: list[dict], cls: str, resume: set[str], serves: set[str], predicted: int,
) -> None:
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    scripts = Scripts(redis, Timing(30.0, 30.0, 64, max_slack_s=SLACK, preempt=True, quantum_tokens=QUANTUM,
                                    max_pauses=MAX_PAUSES))
    for name in ("a", "b", "c"):  # every slot of every backend held by the leases below
        held = sum(1 for le in leases if le["backend"] == name)
        models = ("m",) if name in serves else ("other",)
        await scripts.set_backend(keys, "me", BackendRecord(name, held, models=models, resume=name in resume))
    seconds, micros = await redis.time()
    now = seconds + micros / 1e6
    running, records, progress = [], {}, {}
    for i, le in enumerate(leases):
        lid = f"l{i}"
        score = now + 1.0 + le["score_gap"]  # the urgent ticket's score is now + 1.0 (its slack)
        arrival = now - le["age"]
        records[lid] = pack_lease(
            Lease(le["backend"], "me", 100, False, False, "long", score, le["pauses"], le["tier"], arrival)
        )
        if le["attained"] >= 0:
            progress[lid] = le["attained"]
            running.append(Running(lid, le["backend"], le["attained"], le["pauses"], score, le["tier"], arrival))
    await scripts.heartbeat(keys, "me", records, progress=progress)  # recreates every lease with its slot
    urgent = Ticket("u", "m", "tenant", cls, predicted, 0.0, "interactive", 1.0)
    result = await scripts.enqueue(keys, "me", urgent, 0, 0)

    seconds, micros = await redis.time()
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
    twin = pick_victim(Urgent(cls, "interactive", score, arrival, predicted), running, serves & resume, QUANTUM,
                       MAX_PAUSES, SLACK)
    if twin is None:
        assert paused == [] and granted == []
    else:
        assert len(paused) == 1 and len(granted) == 1
        lua = next(x for x in running if x.lease == paused[0].ticket)
        assert lua.attained == twin.attained
        assert granted[0].detail == paused[0].detail == lua.backend  # the slot changed hands
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
            await handle((await scripts.heartbeat(keys, "me", records, progress=dict(running)))[2])
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
