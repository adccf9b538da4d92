"""What one uncontended scheduled request costs Redis in commands: the enqueue that grants
at once and the release that finds nothing queued, each one ``EVALSHA``, counted by the
server itself (``INFO commandstats``) on a Valkey of this test's own, so nothing else
runs beside it. The budget is twelve; which commands they are is spelled out, so a change
that adds one says where."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from gateway.server.embedded import EmbeddedRedis
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import GrantMessage, pack_lease
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Ticket

ME = "replica-1"


@pytest.fixture(scope="module")
def private_url() -> Iterator[str]:
    server = EmbeddedRedis()
    yield server.start()
    server.stop()


@pytest.fixture
async def private(private_url: str) -> AsyncIterator[Redis]:
    redis = Redis.from_url(private_url)
    yield redis
    await redis.aclose()


async def calls(redis: Redis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}


def spent(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


async def test_a_scheduled_request_costs_redis_at_most_twelve_commands(private: Redis) -> None:
    scripts = Scripts(private, Timing(lease_ttl_s=30.0, owner_ttl_s=3.0, max_scan=64))
    keys = PoolKeys("budget", "p")
    for i in range(8):
        await scripts.set_backend(keys, ME, BackendRecord(f"b{i}", 4, models=("m",)))
    await scripts.enqueue(keys, ME, Ticket("warm", "m", "default", "short", 20, 0.0, "interactive", 0.0), 0, 0)  # scripts loaded
    await scripts.release(keys, ME, "warm")

    before = await calls(private)
    granted = await scripts.enqueue(keys, ME, Ticket("t1", "m", "default", "short", 20, 0.0, "interactive", 0.0), 0, 0)
    (grant,) = granted.messages
    assert isinstance(grant, GrantMessage)
    middle = await calls(private)
    await scripts.release(keys, ME, "t1", pack_lease(grant.lease))
    after = await calls(private)

    enqueue, release = spent(before, middle), spent(middle, after)
    # granted at once: the clock, the queue's length, every backend, the lease written once
    # (a retried call finds it), the chosen backend's slot written back
    assert enqueue == {"evalsha": 1, "time": 1, "zcard": 1, "hgetall": 1, "hsetnx": 1, "hset": 1}
    # nothing queued: the lease deleted, its backend's slot read and written back
    assert release == {"evalsha": 1, "zcard": 1, "hdel": 1, "hget": 1, "hset": 1}
    assert sum(enqueue.values()) + sum(release.values()) <= 12


async def test_scripts_that_never_saw_the_replicas_backends_read_them_from_redis(private: Redis) -> None:
    """The backends a replica can call come with its enqueue from the scripts it registered
    them through; other scripts (another process acting for it) read them back from Redis,
    and grant it only what it registered there too."""
    keys = PoolKeys("reach", "p")
    mine = Scripts(private, Timing(lease_ttl_s=30.0, owner_ttl_s=3.0, max_scan=64))
    await mine.set_backend(keys, ME, BackendRecord("b1", 2, models=("m",)))
    await mine.set_backend(keys, "other", BackendRecord("b2", 9, models=("m",)))  # the freer, not this replica's
    elsewhere = Scripts(private, Timing(lease_ttl_s=30.0, owner_ttl_s=3.0, max_scan=64))

    def ticket(tid: str) -> Ticket:
        return Ticket(tid, "m", "default", "short", 20, 0.0, "interactive", 0.0)

    before = await calls(private)
    first = await elsewhere.enqueue(keys, ME, ticket("t0"), 0, 0)
    middle = await calls(private)
    second = await mine.enqueue(keys, ME, ticket("t1"), 0, 0)
    after = await calls(private)
    assert [(m.ticket, m.detail) for m in first.messages] == [("t0", "b1")]
    assert [(m.ticket, m.detail) for m in second.messages] == [("t1", "b1")]
    assert spent(before, middle).get("hget") == 1 and "hget" not in spent(middle, after)
