"""The shared queue against a real Redis-protocol server: grants, order, cancel, leases."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from scheduler.errors import DeadlineExceeded, QueueFull, Shed
from scheduler.queue import readback
from scheduler.queue.dispatcher import Dispatcher, QueueLimits
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import grant_message, pack_message, parse_lease
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Grant, Message, MessageKind, Ticket
from tests.support import eventually

POOL = "m"


def spec(slack: float = 0.0, timeout: float = 0.0, tenant: str = "default") -> Ticket:
    return Ticket(uuid.uuid4().hex, "m", tenant, "short", 10, timeout, "interactive", slack)



@pytest.fixture
async def make(any_redis_url: str, prefix: str) -> AsyncIterator[Callable[..., Dispatcher]]:
    made: list[tuple[Dispatcher, Redis, Redis]] = []

    def build(
        lease_ttl: float = 30.0, limits: QueueLimits | None = None, start: bool = True, hb: float = 0.2
    ) -> Dispatcher:
        redis, listen = Redis.from_url(any_redis_url), Redis.from_url(any_redis_url)
        scripts = Scripts(redis, Timing(lease_ttl_s=lease_ttl, owner_ttl_s=max(1.0, 3 * hb), max_scan=64))
        d = Dispatcher(redis, listen, scripts, prefix=prefix, owner=uuid.uuid4().hex[:8], pools=[POOL],
                       limits=limits or QueueLimits(), heartbeat_s=hb)
        made.append((d, redis, listen))
        return d

    yield build
    for d, redis, listen in made:
        await d.stop()
        await redis.aclose()
        await listen.aclose()


def scripts_on(redis: Redis) -> Scripts:
    """The scripts as a replica would call them, outside any dispatcher."""
    return Scripts(redis, Timing(lease_ttl_s=30.0, owner_ttl_s=3.0, max_scan=64))


async def add_backend(d: Dispatcher, name: str = "b1", limit: int = 1) -> None:
    await d.publish_backend(POOL, BackendRecord(name, limit, models=("m",)))


async def one_running_one_queued(
    make: Callable[..., Dispatcher], redis: Redis, prefix: str, hb: float = 0.2
) -> tuple[Dispatcher, Grant, asyncio.Task[Grant], PoolKeys]:
    """A started dispatcher whose only slot is held and one ticket waits for it."""
    d = make(hb=hb)
    await d.start()
    await add_backend(d, limit=1)
    held = await d.acquire(spec(), POOL)
    waiting = asyncio.create_task(d.acquire(spec(), POOL))
    keys = PoolKeys(prefix, POOL)
    await eventually(lambda: queue_len(redis, keys, lambda n: n >= 1))
    return d, held, waiting, keys


async def queue_len(redis: Redis, keys: PoolKeys, test: Callable[[int], bool]) -> bool:
    return test(await redis.zcard(keys.queue))


async def busy_is(redis: Redis, prefix: str, n: int) -> bool:
    return await busy(redis, prefix) == n


async def busy(redis: Redis, prefix: str, backend: str = "b1") -> int:
    return await readback.busy(redis, PoolKeys(prefix, POOL), backend)


async def test_grant_at_once_and_release(make, redis, prefix) -> None:
    d = make()
    await d.start()
    await add_backend(d, limit=2)
    grant = await d.acquire(spec(), POOL)
    assert grant.backend == "b1"
    assert await busy(redis, prefix) == 1
    await d._release(POOL, grant.ticket)
    assert await busy(redis, prefix) == 0


async def test_a_release_with_the_held_record_frees_its_slot_once(make, redis, prefix) -> None:
    """The owner passes the lease's record (the script then does not read it back): the slot
    is freed, the lease and its expiry are gone, and a second release (or one of a lease the
    queue already dropped) frees nothing more, with or without the record."""
    d = make()
    await add_backend(d, limit=3)
    scripts, keys = scripts_on(redis), PoolKeys(prefix, POOL)
    grants = [await d.acquire(spec(), POOL) for _ in range(2)]
    assert await busy(redis, prefix) == 2
    first = grants[0].ticket
    record = d.held(POOL)[first]
    await scripts.release(keys, d.owner, first, record)
    assert await busy(redis, prefix) == 1
    assert await redis.hget(keys.lease, first) is None
    await scripts.release(keys, d.owner, first, record)
    await scripts.release(keys, d.owner, first)
    assert await busy(redis, prefix) == 1  # the other lease still holds its slot
    second = grants[1].ticket
    await scripts.release(keys, d.owner, second)  # no record: read back, the same outcome
    assert await busy(redis, prefix) == 0


async def test_replicas_counts_live_heartbeats(make) -> None:
    a, b = make(hb=5.0), make(hb=5.0)
    await add_backend(a)  # registering writes a heartbeat
    assert await a.replicas(POOL) == 1
    await add_backend(b)
    assert await a.replicas(POOL) == 2 and await b.replicas(POOL) == 2


async def test_release_grants_next_in_score_order(make, redis, prefix) -> None:
    d = make()
    await d.start()
    await add_backend(d, limit=1)
    first = await d.acquire(spec(), POOL)
    order: list[str] = []

    async def wait(s: Ticket, label: str) -> Grant:
        g = await d.acquire(s, POOL)
        order.append(label)
        d.release_soon(g)
        return g

    keys = PoolKeys(prefix, POOL)
    long_t = asyncio.create_task(wait(spec(slack=30), "long"))
    await eventually(lambda: queue_len(redis, keys, lambda n: n == 1))  # in Redis, not only here
    short_t = asyncio.create_task(wait(spec(slack=1), "short"))
    await eventually(lambda: queue_len(redis, keys, lambda n: n == 2))
    d.release_soon(first)
    await asyncio.gather(long_t, short_t)
    assert order == ["short", "long"]


async def test_queue_full_is_rejected(make, redis, prefix) -> None:
    d = make(limits=QueueLimits(max_queue=1))
    await d.start()
    await add_backend(d, limit=1)
    await d.acquire(spec(), POOL)
    waiting = asyncio.create_task(d.acquire(spec(), POOL))
    await eventually(lambda: queue_len(redis, PoolKeys(prefix, POOL), lambda n: n == 1))
    with pytest.raises(QueueFull) as err:
        await d.acquire(spec(), POOL)
    assert err.value.retry_after_s >= 1
    waiting.cancel()


async def test_cancelled_waiter_leaves_the_queue(make, redis, prefix) -> None:
    d, held, waiting, keys = await one_running_one_queued(make, redis, prefix)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await eventually(lambda: queue_len(redis, keys, lambda n: n == 0))
    d.release_soon(held)
    await eventually(lambda: busy_is(redis, prefix, 0))
    assert await redis.hlen(keys.tickets) == 0


async def test_deadline_evicts(make) -> None:
    d = make()
    await d.start()
    await add_backend(d, limit=1)
    await d.acquire(spec(), POOL)
    with pytest.raises(DeadlineExceeded):
        await d.acquire(spec(timeout=0.2), POOL)


async def test_grant_crosses_replicas_through_the_inbox(make, redis, prefix) -> None:
    a, b = make(), make()
    await a.start()
    await b.start()
    await add_backend(a, limit=1)
    await add_backend(b, limit=1)  # each replica registers the backends it can call
    held = await a.acquire(spec(), POOL)
    waiting = asyncio.create_task(b.acquire(spec(), POOL))
    await eventually(lambda: b.queued_here >= 1)
    a.release_soon(held)  # a's release dispatches b's ticket: pushed to b's inbox
    grant = await asyncio.wait_for(waiting, 10)
    assert grant.backend == "b1"
    assert await busy(redis, prefix) == 1


async def test_dead_replica_slots_come_back(make, redis, prefix) -> None:
    dead = make(lease_ttl=0.5)
    await add_backend(dead, limit=1)
    await dead.acquire(spec(), POOL)  # never started: never renews its lease
    assert await busy(redis, prefix) == 1
    alive = make(lease_ttl=0.5)
    await add_backend(alive, limit=1)
    await alive.start()
    grant = await asyncio.wait_for(alive.acquire(spec(), POOL), 10)  # heartbeat sweeps, then grants
    assert grant.backend == "b1"


async def test_redis_data_loss_requeues_waiters(make, redis, prefix) -> None:
    d, held, waiting, keys = await one_running_one_queued(make, redis, prefix, hb=60)  # the test beats
    await d.heartbeat(POOL)
    lost = [key async for key in redis.scan_iter(match=f"{keys.base}:*")]
    await redis.delete(*lost)  # at once, as a restarted Redis without persistence would be
    await add_backend(d, limit=1)
    await d.heartbeat(POOL)  # recreates the held lease and requeues the waiter
    assert await busy(redis, prefix) == 1
    assert await redis.zcard(keys.queue) == 1
    d.release_soon(held)
    grant = await asyncio.wait_for(waiting, 10)
    assert grant.backend == "b1"


@pytest.mark.parametrize("queued", [False, True], ids=["granted-at-once", "granted-after-waiting"])
async def test_redis_data_loss_rebuilds_the_lease_the_grant_wrote(make, any_redis_url, prefix, queued) -> None:
    """The heartbeat recreates a lost lease from the replica's copy, which is the whole
    record the grant wrote: its class, score, tier and arrival are what a pause reads."""
    d = make(hb=60)  # the test beats
    await d.start()
    await add_backend(d, limit=1 if queued else 2)
    keys = PoolKeys(prefix, POOL)
    redis = Redis.from_url(any_redis_url)
    try:
        first = await d.acquire(spec(), POOL)
        ticket = Ticket(uuid.uuid4().hex, "m", "acme", "medium", 900, 0.0, "batch", 2.5, 1.0, age_s=0.25, pauses=1)
        waiting = asyncio.create_task(d.acquire(ticket, POOL))
        if queued:  # granted by the dispatch a release runs, not by its own enqueue
            await eventually(lambda: queue_len(redis, keys, lambda n: n == 1))
            d.release_soon(first)
        grant = await asyncio.wait_for(waiting, 10)
        granted = await redis.hget(keys.lease, grant.ticket)
        lease = parse_lease(granted)
        assert (lease.cls, lease.tier, lease.pauses, lease.predicted) == ("medium", "batch", 1, 900)
        await redis.delete(*[key async for key in redis.scan_iter(match=f"{keys.base}:*")])
        await d.heartbeat(POOL)
        assert await redis.hget(keys.lease, grant.ticket) == granted
    finally:
        await redis.aclose()


async def test_a_retried_enqueue_gets_the_first_answer(redis, prefix) -> None:
    """A client retries a script whose reply was lost with its connection: the ticket is
    granted once (same lease, one slot) or queued once, whatever the number of calls."""
    scripts = scripts_on(redis)
    keys = PoolKeys(prefix, POOL)
    await scripts.set_backend(keys, "me", BackendRecord("b1", 1, models=("m",)))
    running, waiting = spec(), spec()
    first = await scripts.enqueue(keys, "me", running, 0, 0)
    again = await scripts.enqueue(keys, "me", running, 0, 0)
    assert [(m.kind, m.ticket, m.detail) for m in first.messages] == [("G", running.id, "b1")]
    assert again.messages == first.messages
    assert await busy(redis, prefix) == 1
    for _ in range(2):
        result = await scripts.enqueue(keys, "me", waiting, 0, 0)
        assert (result.status, result.queue_len, result.messages) == (1, 1, [])
    assert await redis.zcard(keys.queue) == 1
    assert await redis.hget(keys.tenant_queued, "default") == b"1"


async def test_a_grant_told_twice_holds_one_lease(make, redis, prefix) -> None:
    """The same grant arriving again (a retried call's reply and the inbox) is ignored:
    the request keeps its slot; it is not released as a grant nobody waits for."""
    d, held, waiting, keys = await one_running_one_queued(make, redis, prefix)
    queued_id = (await redis.zrange(keys.queue, 0, 0))[0].decode()
    inbox = keys.inbox(d.owner)
    again = grant_message(held.ticket, parse_lease(await redis.hget(keys.lease, held.ticket)))
    evicted = Message(MessageKind.EVICT, queued_id, "shed")
    await redis.rpush(inbox, pack_message(again), pack_message(evicted))  # handled in order
    with pytest.raises(Shed):
        await waiting
    assert held.ticket in d.held(POOL)
    assert await busy(redis, prefix) == 1


async def test_a_grant_whose_message_was_lost_reaches_its_waiter(make, redis, prefix) -> None:
    """A script granted the waiting ticket but its reply never reached the replica (the
    connection died): the replica's next heartbeat finds the lease and tells it again."""
    d, held, waiting, keys = await one_running_one_queued(make, redis, prefix)
    queued_id = (await redis.zrange(keys.queue, 0, 0))[0].decode()
    elsewhere = scripts_on(redis)
    # a call made as this replica whose answer is dropped: a second slot, granted to the waiter
    lost = await elsewhere.set_backend(keys, d.owner, BackendRecord("b1", 2, models=("m",)))
    assert [(m.kind, m.ticket) for m in lost] == [("G", queued_id)]
    async with asyncio.timeout(30):  # a hang guard: the heartbeat runs every 0.2 s
        grant = await waiting
    assert grant.ticket == queued_id
    assert set(d.held(POOL)) == {held.ticket, queued_id}
    assert await busy(redis, prefix) == 2


async def test_a_lost_grant_nobody_waits_for_is_released(make, redis, prefix) -> None:
    d = make()
    await d.start()
    await add_backend(d, limit=1)
    keys = PoolKeys(prefix, POOL)
    elsewhere = scripts_on(redis)
    lost = await elsewhere.enqueue(keys, d.owner, spec(), 0, 0)  # granted to d; d never hears of it
    assert [m.kind for m in lost.messages] == ["G"]
    assert await busy(redis, prefix) == 1
    await eventually(lambda: busy_is(redis, prefix, 0))  # well before the 30 s lease runs out
    assert await redis.hlen(keys.lease) == 0


async def test_a_late_replicas_dropped_ticket_is_queued_again(make, redis, prefix) -> None:
    """A replica whose loop stalled past its owner TTL looks dead: another replica's
    dispatch drops its queued tickets. Its next heartbeat finds them gone and queues them
    again, so the waiter is granted instead of waiting for its deadline."""
    late = make(hb=60)  # the test beats for it
    await late.start()
    other = make(hb=60)
    await add_backend(late, limit=0)  # no slot yet: the ticket queues
    waiting = asyncio.create_task(late.acquire(spec(), POOL))
    keys = PoolKeys(prefix, POOL)
    await eventually(lambda: queue_len(redis, keys, lambda n: n == 1))
    await redis.zadd(keys.owners, {late.owner: 0})  # its heartbeat is overdue
    await add_backend(other, limit=1)  # the other replica's dispatch meets the ticket, drops it
    assert await redis.zcard(keys.queue) == 0 and not waiting.done()
    await late.heartbeat(POOL)  # the late replica is back
    async with asyncio.timeout(30):  # a hang guard
        grant = await waiting
    assert grant.backend == "b1"
    assert await busy(redis, prefix) == 1
