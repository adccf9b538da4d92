"""Slot reservation: the long cap per backend, enforced by the real dispatch script."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from scheduler.policy.reservation import Reservation, ReservationParams
from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import pack_lease
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Lease, Ticket

ME = "owner-1"



def spec(long: bool, slack: float) -> Ticket:
    cls = "long" if long else "short"
    return Ticket(uuid.uuid4().hex[:12], "m", "t", cls, 2000 if long else 20, 0.0, "interactive", slack,
                      restricted=long)


def test_disabled_reservation_caps_nothing() -> None:
    r = Reservation(ReservationParams(enabled=False))
    assert r.long_cap(8) == 8 and r.borrow(8) == 0


def test_share_follows_open_demand_between_floor_and_ceiling() -> None:
    params = ReservationParams(enabled=True, min_long_share=0.25, max_long_share=0.75, headroom_slots=1.0)
    r = Reservation(params)
    r.tick(1.0)
    assert r.long_cap(8) == 6  # no demand: the ceiling share
    for _ in range(10):
        r.on_open_done(3.0)  # 30 s of short service in 10 s: three slots busy on average
        r.tick(1.0)
    assert r.long_cap(8) == 4  # 1 - (3 + 1) / 8 = 0.5
    for _ in range(50):
        r.on_open_done(10.0)
        r.tick(1.0)
    assert r.long_cap(8) == 2  # the floor share


def test_cap_never_falls_below_what_long_work_needs() -> None:
    params = ReservationParams(enabled=True, min_long_share=0.25, max_long_share=0.875, headroom_slots=1.0,
                               long_target_utilization=0.9)
    r = Reservation(params)
    for _ in range(10):
        r.on_open_done(3.0)  # shorts keep three slots busy: alone they would leave long work 4 of 8
        r.on_restricted_arrival()  # one long a second, 5 s each: five slots of long load
        r.on_restricted_done(5.0)
        r.tick(1.0)
    assert r.long_demand_slots == pytest.approx(5.0)
    assert r.long_cap(8) == 6  # ceil(5 / 0.9): long work keeps up; the reserve gets the rest
    for _ in range(10):
        r.on_restricted_arrival()
        r.on_restricted_arrival()
        r.on_restricted_done(5.0)
        r.tick(1.0)
    assert r.long_cap(8) == 7  # more long load than the cap can hold: the ceiling still keeps a reserve


def test_demand_seen_by_one_replica_is_scaled_by_the_live_replicas() -> None:
    r = Reservation(ReservationParams(enabled=True, min_long_share=0.25, max_long_share=0.875, headroom_slots=1.0))
    for _ in range(10):
        r.on_open_done(1.5)  # this replica sees 1.5 slots of short demand
        r.tick(1.0)
    assert r.long_cap(8) == 5  # 1 - (1.5 + 1) / 8
    r.replicas = 2  # the other replica sees as much: three slots in all
    assert r.long_cap(8) == 4


def test_quiet_after_no_open_arrivals() -> None:
    r = Reservation(ReservationParams(enabled=True, quiet_after_s=5.0))
    r.on_open_arrival()
    r.tick(3.0)
    assert not r.quiet
    r.tick(3.0)
    assert r.quiet
    r.on_open_arrival()
    assert not r.quiet


async def lease_counts(redis: Redis, keys: PoolKeys) -> tuple[int, int]:
    b = (await readback.backend_states(redis, keys))["b"]
    return b.busy, b.lbusy


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(min_value=2, max_value=6),
    k_share=st.floats(min_value=0.2, max_value=0.9),
    ops=st.lists(st.tuples(st.sampled_from(["long", "short", "release"]), st.floats(0, 30)), max_size=40),
)
async def test_long_never_holds_more_than_its_cap_while_short_waits(
    redis: Redis, n: int, k_share: float, ops: list[tuple[str, float]]
) -> None:
    k = max(1, int(k_share * n))
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    held: list[str] = []
    await scripts.set_backend(keys, ME, BackendRecord("b", n, models=("m",), long_cap=k, borrow=0))
    for op, slack in ops:
        if op == "release":
            if not held:
                continue
            messages = await scripts.release(keys, ME, held.pop(0))
        else:
            result = await scripts.enqueue(keys, ME, spec(op == "long", slack), 0, 0)
            messages = result.messages
        held += [m.ticket for m in messages if m.kind == "G"]
        busy, lbusy = await lease_counts(redis, keys)
        assert busy <= n
        assert lbusy <= k  # without borrowing, never above the cap
        shorts_waiting = int(await redis.hget(keys.stats, "queued_open") or 0)
        if shorts_waiting:
            assert busy == n  # a short only waits when every slot is taken


async def test_long_work_borrows_only_while_short_work_is_quiet(redis: Redis) -> None:
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    await scripts.set_backend(keys, ME, BackendRecord("b", 4, models=("m",), long_cap=2, borrow=1))
    granted = []
    for _ in range(4):
        granted += (await scripts.enqueue(keys, ME, spec(True, 10), 0, 0)).messages
    assert len(granted) == 2  # not quiet: the reserve stays free
    held = {m.ticket: pack_lease(Lease(m.detail, ME, 2000, True, m.borrowed)) for m in granted}
    quiet = await scripts.heartbeat(keys, ME, held, quiet=True)
    assert [m.borrowed for m in quiet[2]] == [True]  # one borrowed slot, no more
    busy, lbusy = await lease_counts(redis, keys)
    assert (busy, lbusy) == (3, 3)
    short = await scripts.enqueue(keys, ME, spec(False, 1), 0, 0)
    assert [m.kind for m in short.messages] == ["G"]  # the last free slot is the short's
