"""Each record format is written once per language: records.py and _common.lua agree.

Python -> Lua: a lease Python packed is read and written back unchanged by the scripts.
Lua -> Python: tickets, leases and messages the scripts wrote parse into what was sent.
Lua's lease builder (``lease_of`` + ``pack_lease``) and Python's ``pack_lease`` write the
same record, field for field.
"""

from __future__ import annotations

import dataclasses
import uuid
from importlib import resources

import pytest
from redis.asyncio import Redis

from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import (
    BackendSlots,
    GrantMessage,
    PauseMessage,
    grant_message,
    pack_backend,
    pack_cost,
    pack_lease,
    pack_message,
    pack_progress,
    parse_backend,
    parse_cost,
    parse_lease,
    parse_message,
    parse_progress,
    parse_ticket,
)
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Lease, Message, MessageKind, ResumeCost, Ticket

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


LEASES = [
    Lease("gpu-a", ME, 0, True, True, "short", 1764580000.125, 1, "batch", 1764579999.5),
    Lease("x", ME, 4000, True, False, "long", 12.0, 2, "interactive", 3.25),
    Lease("b-2", "replica-9", 77, False, False, "medium", 1764580031.2345, 0, "", 1764580001.2345),
]


def assert_same_fields(got: Lease, want: Lease) -> None:
    """Field for field, so a field one side forgets is named."""
    for f in dataclasses.fields(Lease):
        assert (f.name, getattr(got, f.name)) == (f.name, getattr(want, f.name))


@pytest.mark.parametrize(
    "lease",
    [Lease("b1", ME, 120, False, False), Lease("gpu-a", ME, 0, True, True, "short", 1764580000.125, 1, "batch", 1764579999.5),
     Lease("x", ME, 4000, True, False, "long", 12.0, 2, "interactive", 3.25)],
)
def test_lease_round_trips(lease: Lease) -> None:
    assert parse_lease(pack_lease(lease)) == lease


@pytest.mark.parametrize(
    "backend",
    [BackendSlots(), BackendSlots(4, False, 1.0, 0.0, 4, 0, False, 0, 0.0, 0, 0, 0, ("m",)),
     BackendSlots(8, True, 0.5, 41.25, 6, 2, True, 3, 2100.5, 2, 1, 1234, ("m", "m-large"))],
)
def test_backend_round_trips(backend: BackendSlots) -> None:
    assert parse_backend(pack_backend(backend)) == backend


@pytest.mark.parametrize(
    "msg",
    [grant_message("req-1", LEASES[0]), grant_message("req-2", LEASES[1]), Message(MessageKind.EVICT, "req-3", "deadline"),
     Message(MessageKind.LOST, "req-4", "lost"),
         PauseMessage(MessageKind.PAUSE, "req-5", "b1", reason="wait=1.250,cost=0.030")],
)
def test_message_round_trips(msg: Message) -> None:
    assert parse_message(pack_message(msg)) == msg


def test_a_grant_names_its_leases_backend_and_slot() -> None:
    msg = grant_message("req-1", LEASES[0])
    assert (msg.kind, msg.ticket, msg.detail, msg.borrowed) == (MessageKind.GRANT, "req-1", "gpu-a", True)
    with pytest.raises(ValueError):
        pack_message(Message(MessageKind.GRANT, "req-1", "gpu-a"))  # a grant without its lease


# Lua's builder, given a ticket as parse_ticket reads one, and the grant's score, backend and slot
LEASE_OF = """
local t = {owner = ARGV[1], predicted = tonumber(ARGV[2]), restricted = ARGV[3] == '1', class = ARGV[4],
           pauses = tonumber(ARGV[5]), tier = ARGV[6], arrival = tonumber(ARGV[7]), model = 'm', tenant = 'x'}
return pack_lease(lease_of(t, tonumber(ARGV[8]), ARGV[9], ARGV[10] == '1'))
"""


@pytest.mark.parametrize("lease", LEASES)
async def test_luas_lease_builder_writes_what_pack_lease_writes(redis: Redis, lease: Lease) -> None:
    common = (resources.files("scheduler.queue") / "lua" / "_common.lua").read_text(encoding="utf-8")
    args = [lease.owner, lease.predicted, int(lease.restricted), lease.cls, lease.pauses, lease.tier, lease.arrival,
            lease.score, lease.backend, int(lease.borrowed)]
    record = (await redis.eval(common + LEASE_OF, 0, *args)).decode()
    assert_same_fields(parse_lease(record), lease)
    assert record == pack_lease(lease)


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
    sent = ticket("t1", avoid="", restricted=False, predicted=77, pauses=1)
    result = await scripts.enqueue(keys, ME, sent, 0, 0)
    raw = await redis.hget(keys.lease, "t1")
    lease = parse_lease(raw)
    assert_same_fields(lease, Lease("b1", ME, 77, False, False, "long", lease.score, 1, "batch", lease.arrival))
    seconds, _ = await redis.time()
    assert seconds - 60 < lease.arrival <= seconds + 1  # its request's arrival, on Redis's clock
    assert lease.score == pytest.approx(lease.arrival + 1.0, abs=1e-3)  # its queue score: arrival + slack
    assert pack_lease(lease) == raw.decode()
    # the grant carries the lease whole: what the replica keeps is what Redis holds
    assert result.messages == [grant_message("t1", lease)]
    assert isinstance(result.messages[0], GrantMessage)


async def test_a_lease_python_packed_is_kept_as_it_is(redis: Redis, keys: PoolKeys) -> None:
    """The heartbeat recreates a lost lease from the record the replica holds."""
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    await scripts.set_backend(keys, ME, BackendRecord("b1", 4, models=("m",)))
    record = pack_lease(Lease("b1", ME, 900, True, True, "long", 1764580000.125, 1, "batch", 1764579999.5))
    await scripts.heartbeat(keys, ME, {"lost": record})
    assert (await redis.hget(keys.lease, "lost")).decode() == record
    b = (await readback.backend_states(redis, keys))["b1"]
    assert (b.busy, b.work, b.lbusy, b.borrowed) == (1, 900, 1, 1)
    assert parse_lease(await redis.hget(keys.lease, "lost")).owner == ME


async def test_an_eviction_lua_sent_parses(redis: Redis, keys: PoolKeys) -> None:
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    await scripts.set_backend(keys, ME, BackendRecord("b1", 0, models=("m",)))
    await scripts.enqueue(keys, ME, ticket("t1", timeout_s=0.001, restricted=False), 0, 0)
    # a slot on a backend that does not serve its model, so a dispatch meets the ticket and cannot grant
    # it; written as it is, without a dispatch, so the first one to meet the ticket is a release below
    await redis.hset(keys.backends, "b2", pack_backend(BackendSlots(1, lcap=1, models=("other",))))
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
    assert b == BackendSlots(3, False, 0.5, 42.5, 2, 1, True, 1, 70.0, 0, 0, 1, ("m", "m2"))
    assert pack_backend(b) == raw.decode()
    assert await readback.reach(redis, keys, ME) == {"b1"}


# -- the pause's own formats: progress, cost, the pause message --------------------------

PAUSE_FORMATS = """
local attained, prompt = parse_progress(ARGV[1])
local c = parse_cost(ARGV[2] ~= '' and ARGV[2] or nil)
return {tostring(attained), tostring(prompt), tostring(c.tpot), tostring(c.prefill), tostring(c.hit),
        tostring(c.block), pause_message('l1', 'b1', tonumber(ARGV[3]), tonumber(ARGV[4])), tostring(c.base)}
"""


@pytest.mark.parametrize(("progress", "cost"), [
    ((700, 1234), ResumeCost(0.0078, 0.00025, 0.35, 128, 0.0125)),
    ((65, 0), ResumeCost()),
])
async def test_lua_reads_progress_and_costs_as_python_writes_them(
    redis: Redis, progress: tuple[int, int], cost: ResumeCost
) -> None:
    common = (resources.files("scheduler.queue") / "lua" / "_common.lua").read_text(encoding="utf-8")
    out = [x.decode() for x in await redis.eval(
        common + PAUSE_FORMATS, 0, pack_progress(*progress), pack_cost(cost), 1.25, 0.03
    )]
    assert (int(out[0]), int(out[1])) == progress == parse_progress(pack_progress(*progress))
    assert ResumeCost(float(out[2]), float(out[3]), float(out[4]), int(out[5]), float(out[7])) == cost
    assert parse_cost(pack_cost(cost)) == cost
    assert parse_message(out[6]) == PauseMessage(MessageKind.PAUSE, "l1", "b1", reason="wait=1.250,cost=0.030")


async def test_lua_reads_a_missing_cost_as_pythons_defaults(redis: Redis) -> None:
    common = (resources.files("scheduler.queue") / "lua" / "_common.lua").read_text(encoding="utf-8")
    out = [x.decode() for x in await redis.eval(common + PAUSE_FORMATS, 0, "12", "", 0, 0)]
    assert ResumeCost(float(out[2]), float(out[3]), float(out[4]), int(out[5]), float(out[7])) == ResumeCost()
    assert parse_cost(None) == ResumeCost()
    assert (int(out[0]), int(out[1])) == (12, 0) == parse_progress("12")  # a bare count: an older replica's


async def test_the_registrys_cost_is_what_the_pool_holds(redis: Redis, keys: PoolKeys) -> None:
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    cost = ResumeCost(0.0078, 0.00025, 0.35, 128, 0.015)
    await scripts.set_backend(keys, ME, BackendRecord("b1", 2, models=("m",), resume=True, cost=cost))
    assert parse_cost(await redis.hget(keys.costs, "b1")) == cost
