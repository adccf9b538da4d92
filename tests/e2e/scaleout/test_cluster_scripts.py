"""Every script on a real Redis Cluster: each runs whole on the shard owning its pool's slot
(a key on another shard fails there, the server refuses it; every key a pool has hashes to
the pool's slot, so none can), and a grant for another replica reaches it by push, through
a BLPOP on that shard."""

from __future__ import annotations

import asyncio
import uuid

from redis.crc import key_slot

from gateway.server import redis_client
from scheduler.queue import readback
from scheduler.queue.dispatcher import Dispatcher, QueueLimits
from scheduler.queue.keys import FIXED, NAMED, PoolKeys
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Ticket
from tests.support import eventually
from tests.topologies import Cluster


def test_every_key_of_a_pool_hashes_to_the_pool_slot() -> None:
    keys = PoolKeys("triage", "chat")
    slot = key_slot(keys.base.encode())
    names = [getattr(keys, attr) for attr in FIXED] + [getattr(keys, n)("x") for n in NAMED]
    assert {key_slot(name.encode()) for name in names} == {slot}
    assert key_slot(PoolKeys("triage", "other").base.encode()) != slot  # the tag is the pool


def ticket() -> Ticket:
    return Ticket(uuid.uuid4().hex, "m", "default", "short", 10, 0.0, "interactive", 0.0)


async def test_scripts_and_a_pushed_grant_on_a_cluster(cluster: Cluster, prefix: str) -> None:
    made: list[tuple[Dispatcher, object, object]] = []

    def dispatcher() -> Dispatcher:
        redis = redis_client.command_client(cluster.url, "t")
        listen = redis_client.listener_client(cluster.url, "t-inbox")
        scripts = Scripts(redis, Timing(lease_ttl_s=30.0, owner_ttl_s=3.0, max_scan=64))
        d = Dispatcher(redis, listen, scripts, prefix=prefix, owner=uuid.uuid4().hex[:8], pools=["m"],
                       limits=QueueLimits(), heartbeat_s=0.2)
        made.append((d, redis, listen))
        return d

    a, b = dispatcher(), dispatcher()
    try:
        await a.start()
        await b.start()
        await a.publish_backend("m", BackendRecord("b1", 1, models=("m",)))  # backend.lua
        await b.publish_backend("m", BackendRecord("b1", 1, models=("m",)))  # b can call it too
        held = await a.acquire(ticket(), "m")  # enqueue.lua, granted in its reply
        gone = ticket()
        withdrawn = asyncio.create_task(b.acquire(gone, "m"))
        waiting = asyncio.create_task(b.acquire(ticket(), "m"))
        redis = made[0][1]
        queue = PoolKeys(prefix, "m").queue
        await eventually(lambda: _queued(redis, queue, 2))
        withdrawn.cancel()  # cancel.lua
        await eventually(lambda: _queued(redis, queue, 1))
        await a.heartbeat("m")  # heartbeat.lua
        a.release_soon(held)  # release.lua: the slot goes to b's ticket, pushed to b's inbox
        granted = await asyncio.wait_for(waiting, 30)
        assert granted.backend == "b1"
        b.release_soon(granted)
        await eventually(lambda: _busy(redis, prefix, 0))
    finally:
        for d, redis, listen in made:
            await d.stop()
            await redis.aclose()  # type: ignore[attr-defined]
            await listen.aclose()  # type: ignore[attr-defined]


async def _queued(redis, queue: str, n: int) -> bool:
    return int(await redis.zcard(queue)) == n


async def _busy(redis, prefix: str, n: int) -> bool:
    return await readback.busy(redis, PoolKeys(prefix, "m"), "b1") == n
