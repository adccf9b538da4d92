"""Each record format is written once per language: records.py and _dispatch.lua agree.

Python -> Lua: a lease Python packed is read and written back unchanged by the scripts.
Lua -> Python: tickets, leases and messages the scripts wrote parse into what was sent.
"""

from __future__ import annotations

import uuid

import pytest
from redis.asyncio import Redis

from scheduler.queue import state
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import (
    BackendState,
    pack_backend,
    pack_lease,
    pack_message,
    parse_backend,
    parse_lease,
    parse_message,
    parse_ticket,
)
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Lease, Message, MessageKind, Ticket

ME = "owner-1"



@pytest.fixture
def keys() -> PoolKeys:
    return PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")


def ticket(tid: str, **kw: object) -> Ticket:
    fields: dict[str, object] = dict(
        model="m", tenant="acme", cls="long", predicted=1500, timeout_s=60.0, tier="batch", slack_s=1.0,
        avoid="b0", restricted=True,
    )
    fields.update(kw)
    return Ticket(tid, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "lease",
    [Lease("b1", ME, 120, False, False), Lease("gpu-a", ME, 0, True, True, "short", 1764580000.125, 1, "batch", 1764579999.5),
     Lease("x", ME, 4000, True, False, "long", 12.0, 2, "interactive", 3.25)],
)
def test_lease_round_trips(lease: Lease) -> None:
    assert parse_lease(pack_lease(lease)) == lease


@pytest.mark.parametrize(
    "backend",
    [BackendState(), BackendState(4, False, 1.0, 0.0, 4, 0, False, 0, 0.0, 0, 0, 0, ("m",)),
     BackendState(8, True, 0.5, 41.25, 6, 2, True, 3, 2100.5, 2, 1, 1234, ("m", "m-large"))],
)
def test_backend_round_trips(backend: BackendState) -> None:
    assert parse_backend(pack_backend(backend)) == backend


@pytest.mark.parametrize(
    "msg",
    [Message(MessageKind.GRANT, "req-1", "b1", True), Message(MessageKind.GRANT, "req-2", "b2", False),
     Message(MessageKind.EVICT, "req-3", "deadline")],
)
def test_message_round_trips(msg: Message) -> None:
    assert parse_message(pack_message(msg)) == msg


async def test_a_ticket_lua_queued_parses_into_what_was_sent(redis: Redis, keys: PoolKeys) -> None:
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    await scripts.set_backend(keys, ME, BackendRecord("b0", 0, models=("m",)))  # no slot: it stays queued
    sent = ticket("t1")
    assert (await scripts.enqueue(keys, ME, sent, 0, 0)).status == 1
    queued = parse_ticket(await redis.hget(keys.tickets, "t1"))
    assert (queued.owner, queued.model, queued.tenant, queued.cls, queued.predicted) == (ME, "m", "acme", "long", 1500)
    assert (queued.tier, queued.avoid, queued.restricted) == ("batch", "b0", True)
    assert queued.arrival > 0 and queued.deadline == pytest.approx(queued.arrival + 60.0)


async def test_a_grant_lua_made_parses_into_its_lease_and_message(redis: Redis, keys: PoolKeys) -> None:
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    await scripts.set_backend(keys, ME, BackendRecord("b1", 2, models=("m",)))
    result = await scripts.enqueue(keys, ME, ticket("t1", avoid="", restricted=False, predicted=77), 0, 0)
    assert result.messages == [Message(MessageKind.GRANT, "t1", "b1", False)]
    raw = await redis.hget(keys.lease, "t1")
    lease = parse_lease(raw)
    assert lease == Lease("b1", ME, 77, False, False, "long", lease.score, 0, "batch", lease.arrival)
    seconds, _ = await redis.time()
    assert seconds - 60 < lease.arrival <= seconds + 1  # its request's arrival, on Redis's clock
    assert lease.score == pytest.approx(lease.arrival + 1.0, abs=1e-3)  # its queue score: arrival + slack
    assert pack_lease(lease) == raw.decode()


async def test_a_lease_python_packed_is_kept_as_it_is(redis: Redis, keys: PoolKeys) -> None:
    """The heartbeat recreates a lost lease from the record the replica holds."""
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    await scripts.set_backend(keys, ME, BackendRecord("b1", 4, models=("m",)))
    record = pack_lease(Lease("b1", ME, 900, True, True))
    await scripts.heartbeat(keys, ME, {"lost": record})
    assert (await redis.hget(keys.lease, "lost")).decode() == record
    b = (await state.backend_states(redis, keys))["b1"]
    assert (b.busy, b.work, b.lbusy, b.borrowed) == (1, 900, 1, 1)
    assert await redis.sismember(keys.owned(ME), "lost")


async def test_an_eviction_lua_sent_parses(redis: Redis, keys: PoolKeys) -> None:
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    await scripts.set_backend(keys, ME, BackendRecord("b1", 0, models=("m",)))
    await scripts.enqueue(keys, ME, ticket("t1", timeout_s=0.001, restricted=False), 0, 0)
    # a slot on a backend that does not serve its model, so a dispatch meets the ticket and cannot grant
    # it; written as it is, without a dispatch, so the first one to meet the ticket is a release below
    await redis.hset(keys.backends, "b2", pack_backend(BackendState(1, lcap=1, models=("other",))))
    for _ in range(100_000):  # until its 1 ms deadline has passed on Redis's clock
        if messages := await scripts.release(keys, ME, "none"):
            break
    assert messages == [Message(MessageKind.EVICT, "t1", "deadline")]


async def test_a_backend_lua_wrote_parses_and_python_packs_it_the_same(redis: Redis, keys: PoolKeys) -> None:
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    sent = BackendRecord("b1", 3, models=("m", "m2"), weight=0.5, speed=42.5, long_cap=2, borrow=1, resume=True)
    await scripts.set_backend(keys, ME, sent)
    await scripts.enqueue(keys, ME, ticket("t1", avoid="", restricted=False, predicted=70), 0, 0)
    raw = await redis.hget(keys.backends, "b1")
    b = parse_backend(raw)
    assert b == BackendState(3, False, 0.5, 42.5, 2, 1, True, 1, 70.0, 0, 0, 1, ("m", "m2"))
    assert pack_backend(b) == raw.decode()
    assert await state.reach(redis, keys, ME) == {"b1"}
