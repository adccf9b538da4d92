"""The backend pick: a table of cases for the pure rule, and the rule held equal to the
dispatch script's on random pool states (real Lua, real Redis-protocol servers)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from scheduler.policy.routing import Pick, SlotState, pick_backend
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import BackendSlots, pack_backend
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import Ticket


def s(busy: int = 0, work: float = 0, rate: float = 1, lcap: int = 8, lbusy: int = 0, borrow: int = 0) -> SlotState:
    return SlotState(busy, work, rate, lcap, lbusy, borrow)


@pytest.mark.parametrize(
    ("case", "serving", "states", "kw", "expected"),
    [
        ("least outstanding work wins", ["a", "b"], {"a": s(work=500), "b": s(work=100)}, {}, Pick("b")),
        ("work over speed", ["a", "b"], {"a": s(work=500, rate=10), "b": s(work=100)}, {}, Pick("a")),
        ("tie: fewer in flight", ["a", "b"], {"a": s(busy=3), "b": s(busy=1)}, {}, Pick("b")),
        ("full tie: first served", ["a", "b"], {"a": s(), "b": s()}, {}, Pick("a")),
        ("only backends with a free slot", ["a", "b"], {"b": s(work=900)}, {}, Pick("b")),
        ("not one that does not serve it", ["a"], {"a": s(work=900), "b": s()}, {}, Pick("a")),
        ("never the one it avoids", ["a", "b"], {"a": s(), "b": s(work=900)}, {"avoid": "a"}, Pick("b")),
        ("nothing free", ["a"], {}, {}, Pick(None)),
        ("long work stops at the long cap", ["a"], {"a": s(lcap=2, lbusy=2, borrow=2)},
         {"restricted": True}, Pick(None)),
        ("short work ignores the long cap", ["a"], {"a": s(lcap=2, lbusy=2)}, {}, Pick("a")),
        ("long work borrows while quiet", ["a"], {"a": s(lcap=2, lbusy=2, borrow=1)},
         {"restricted": True, "quiet": True}, Pick("a", borrowed=True)),
        ("...but not while short work waits", ["a"], {"a": s(lcap=2, lbusy=2, borrow=1)},
         {"restricted": True, "quiet": True, "open_waiting": 1}, Pick(None)),
        ("...nor past what it may borrow", ["a"], {"a": s(lcap=2, lbusy=3, borrow=1)},
         {"restricted": True, "quiet": True}, Pick(None)),
        ("below the cap, long work is not borrowing", ["a"], {"a": s(lcap=2, lbusy=1, borrow=1)},
         {"restricted": True, "quiet": True}, Pick("a")),
    ],
)
def test_pick(case: str, serving: list[str], states: dict[str, SlotState], kw: dict, expected: Pick) -> None:
    assert pick_backend(serving, states, predicted=100, **kw) == expected, case


# -- the twin: the same answer as the dispatch script ----------------------------------



backend = st.fixed_dictionaries({
    "cap": st.integers(0, 4), "busy": st.integers(0, 4), "work": st.integers(0, 3000),
    "speed": st.sampled_from([None, 20.0, 55.5]), "weight": st.sampled_from([None, 1.0, 2.0]),
    "lcap": st.integers(0, 4), "lbusy": st.integers(0, 5), "borrow": st.integers(0, 2),
    "down": st.booleans(), "serves": st.booleans(), "known": st.sampled_from([True, True, False]),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pool=st.lists(backend, min_size=1, max_size=5), predicted=st.integers(1, 2000), restricted=st.booleans(),
    avoid=st.sampled_from(["", "b0", "b1"]), queued_open=st.integers(0, 2), quiet=st.booleans(),
)
async def test_the_twin_picks_as_the_script_does(
    redis: Redis, pool: list[dict], predicted: int, restricted: bool, avoid: str, queued_open: int, quiet: bool,
) -> None:
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    states: dict[str, SlotState] = {}
    serving: list[str] = []
    known: list[str] = []
    async with redis.pipeline(transaction=False) as pipe:
        for i, b in enumerate(pool):
            name = f"b{i}"
            record = BackendSlots(
                b["cap"], b["down"], b["weight"] or 1.0, b["speed"] or 0.0, b["lcap"], b["borrow"], False, b["busy"],
                b["work"], b["lbusy"], 0, 0, ("m",) if b["serves"] else ("other",),
            )
            pipe.hset(keys.backends, name, pack_backend(record))
            if b["known"]:  # the ticket's owner registered it: it may be granted
                known.append(name)
            if b["serves"] and b["known"]:
                serving.append(name)
            if not b["down"] and b["cap"] > b["busy"]:
                rate = (b["speed"] or 1.0) * (b["weight"] or 1.0)
                states[name] = SlotState(b["busy"], b["work"], rate, b["lcap"], b["lbusy"], b["borrow"])
        if known:
            pipe.hset(keys.reach, "me", "|".join(known))
        if queued_open:
            pipe.hset(keys.stats, "queued_open", queued_open)
        if quiet:
            pipe.set(keys.quiet, "1")
        await pipe.execute()
    # what the script sees as open work waiting: what was queued, plus this ticket if it is open
    waiting = queued_open + (0 if restricted else 1)
    twin = pick_backend(serving, states, predicted, restricted, avoid, waiting, quiet)

    ticket = Ticket("t", "m", "tenant", "short", predicted, 0.0, "interactive", 0.0, avoid=avoid, restricted=restricted)
    result = await Scripts(redis, Timing(30.0, 30.0, 64)).enqueue(keys, "me", ticket, 0, 0)
    granted = [m for m in result.messages if m.ticket == "t"]
    if twin.backend is None:
        assert granted == []
        return
    assert len(granted) == 1
    lua = granted[0]
    assert lua.borrowed == twin.borrowed

    def rank(name: str) -> tuple[float, int]:  # members of a Redis set come in no set order
        st_ = states[name]
        return ((st_.work + predicted) / st_.rate, st_.busy)

    assert rank(lua.detail) == rank(twin.backend)
