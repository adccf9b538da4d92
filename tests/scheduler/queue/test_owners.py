"""Replicas sharing a pool: a grant names only a backend its owner can call, a backend's
models are what it last registered, and replicas that died leave nothing behind."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from scheduler.queue import readback
from scheduler.queue.dispatcher import Dispatcher, QueueLimits
from scheduler.queue.keys import PoolKeys
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, MessageKind, Ticket
from tests.support import eventually

POOL = "m"


def spec(tid: str | None = None, slack: float = 0.0) -> Ticket:
    return Ticket(tid or uuid.uuid4().hex, "m", "default", "short", 10, 0.0, "interactive", slack)


@pytest.fixture
def keys(prefix: str) -> PoolKeys:
    return PoolKeys(prefix, POOL)


@pytest.fixture
def scripts(redis: Redis) -> Scripts:
    return Scripts(redis, Timing(lease_ttl_s=30.0, owner_ttl_s=30.0, max_scan=64))


async def test_a_grant_names_only_a_backend_its_owner_registered(scripts: Scripts, keys: PoolKeys) -> None:
    """A rolling deploy: the old replica knows s1, the new one s1 and s2 (same model).
    The old replica's ticket waits for s1 rather than being granted s2, which it cannot call."""
    await scripts.set_backend(keys, "new", BackendRecord("s1", 0, models=("m",)))
    await scripts.set_backend(keys, "new", BackendRecord("s2", 1, models=("m",)))
    await scripts.set_backend(keys, "old", BackendRecord("s1", 0, models=("m",)))
    old = await scripts.enqueue(keys, "old", spec("t-old"), 0, 0)
    assert old.messages == []  # s2 is free, but not the old replica's
    new = await scripts.enqueue(keys, "new", spec("t-new"), 0, 0)
    assert [(m.ticket, m.detail) for m in new.messages] == [("t-new", "s2")]
    opened = await scripts.set_backend(keys, "old", BackendRecord("s1", 1, models=("m",)))
    assert [(m.kind, m.ticket, m.detail) for m in opened] == [(MessageKind.GRANT, "t-old", "s1")]


async def test_a_backend_that_stops_serving_a_model_is_not_granted_for_it(
    scripts: Scripts, keys: PoolKeys
) -> None:
    await scripts.set_backend(keys, "me", BackendRecord("b", 2, models=("m",)))
    await scripts.set_backend(keys, "me", BackendRecord("b", 2, models=("other",)))  # the next probe round
    result = await scripts.enqueue(keys, "me", spec(), 0, 0)
    assert result.messages == []


async def test_a_shed_ticket_of_a_dead_replica_is_not_pushed_to_its_inbox(
    scripts: Scripts, redis: Redis, keys: PoolKeys
) -> None:
    await scripts.set_backend(keys, "gone", BackendRecord("b", 0, models=("m",)))
    await scripts.enqueue(keys, "gone", spec("t-gone", slack=10.0), 1, 0)
    await redis.zadd(keys.owners, {"gone": 0})  # its heartbeat stopped long ago
    await scripts.set_backend(keys, "me", BackendRecord("b", 0, models=("m",)))
    result = await scripts.enqueue(keys, "me", spec("t-urgent"), 1, 0)  # the queue holds one: shed the other
    assert result.status == 1 and await redis.zrange(keys.queue, 0, -1) == [b"t-urgent"]
    assert not await redis.exists(keys.inbox("gone"))


async def test_a_lease_lives_while_its_owner_beats_and_lapses_a_lease_life_after_its_last_beat(
    redis: Redis, keys: PoolKeys
) -> None:
    """A lease has no expiry of its own: its owner's heartbeat renews it, however old the
    lease is. Once the owner's last heartbeat is older than a lease lives, another replica's
    heartbeat gives the slot back (the owner is not buried yet: that waits a lease life past
    its owner TTL); the owner, back, recreates the lease it still holds."""
    scripts = Scripts(redis, Timing(lease_ttl_s=30.0, owner_ttl_s=3.0, max_scan=64))
    await scripts.set_backend(keys, "a", BackendRecord("b", 1, models=("m",)))
    await scripts.set_backend(keys, "watcher", BackendRecord("b", 1, models=("m",)))
    granted = await scripts.enqueue(keys, "a", spec("t1"), 0, 0)
    record = await redis.hget(keys.lease, "t1")
    assert [m.ticket for m in granted.messages] == ["t1"] and record

    async def beat_a_seconds_ago(seconds: float) -> None:
        now, micros = await redis.time()
        await redis.zadd(keys.owners, {"a": now + micros / 1e6 - seconds + 3.0})  # its expiry: last beat + TTL

    async def busy() -> int:
        return (await readback.backend_states(redis, keys))["b"].busy

    await beat_a_seconds_ago(29.0)  # granted long ago, say: its owner beat within a lease life
    await scripts.heartbeat(keys, "watcher", {})
    assert await busy() == 1 and await redis.hexists(keys.lease, "t1")
    await beat_a_seconds_ago(31.0)
    await scripts.heartbeat(keys, "watcher", {})
    assert await busy() == 0 and not await redis.hexists(keys.lease, "t1")
    assert await redis.zscore(keys.owners, "a") is not None  # lapsed leases, a replica not yet buried
    await scripts.heartbeat(keys, "a", {"t1": record.decode()})  # it was only late
    assert await busy() == 1 and await redis.hget(keys.lease, "t1") == record


@pytest.fixture
async def make(any_redis_url: str, prefix: str) -> AsyncIterator[Callable[[], Dispatcher]]:
    made: list[tuple[Dispatcher, Redis, Redis]] = []

    def build() -> Dispatcher:
        redis, listen = Redis.from_url(any_redis_url), Redis.from_url(any_redis_url)
        scripts = Scripts(redis, Timing(lease_ttl_s=0.5, owner_ttl_s=0.5, max_scan=64))
        d = Dispatcher(redis, listen, scripts, prefix=prefix, owner=uuid.uuid4().hex[:8], pools=[POOL],
                       limits=QueueLimits(), heartbeat_s=0.1)
        made.append((d, redis, listen))
        return d

    yield build
    for d, redis, listen in made:
        await d.stop()
        await redis.aclose()
        await listen.aclose()


async def key_count(redis: Redis, keys: PoolKeys) -> int:
    return len([k async for k in redis.scan_iter(match=f"{keys.base}:*")])


async def test_replicas_restarting_leave_the_keys_as_they_were(
    make: Callable[[], Dispatcher], redis: Redis, keys: PoolKeys
) -> None:
    """Each start mints a new owner id. Each replica here dies with a ticket queued, which
    is granted after it died (the grant goes to its inbox, the lease is recorded as its).
    Once their heartbeats have expired, the keys under the prefix are what they were
    with the one live replica."""
    live = make()
    await live.start()
    await live.publish_backend(POOL, BackendRecord("b", 1, models=("m",)))
    held = await live.acquire(spec(), POOL)
    queued = asyncio.create_task(live.acquire(spec(), POOL))  # a queued ticket leaves its counters
    await eventually(lambda: redis.zcard(keys.queue))
    queued.cancel()
    await eventually(lambda: _is(redis.zcard(keys.queue), 0))
    baseline = await key_count(redis, keys)
    for _ in range(8):
        dead = make()
        await dead.start()
        await dead.publish_backend(POOL, BackendRecord("b", 1, models=("m",)))
        waiting = asyncio.create_task(dead.acquire(spec(), POOL))
        await eventually(lambda: _is(redis.zcard(keys.queue), 1))
        await dead.stop()  # it dies: no more heartbeats, nobody reads its inbox
        live.release_soon(held)  # granted to the dead replica's ticket
        await eventually(lambda: _is(redis.zcard(keys.queue), 0))
        held = await asyncio.wait_for(live.acquire(spec(), POOL), 30)  # once that lease has expired
        waiting.cancel()
    await eventually(lambda: _is(redis.zcard(keys.owners), 1), within_s=30)
    await eventually(lambda: _is(key_count(redis, keys), baseline), within_s=30)
    assert await redis.hlen(keys.reach) == 1


async def _is(value: object, expected: object) -> bool:
    return await value == expected  # type: ignore[misc]
