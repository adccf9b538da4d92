"""Queue depth per pool, class and tier, read back from the shared queue in a real
Redis-protocol server (tickets queued by the real enqueue script)."""

from __future__ import annotations

import uuid

from redis.asyncio import Redis

from scheduler.queue.depth import QueueDepth
from scheduler.queue.keys import PoolKeys
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import Ticket
from tests.support import eventually


async def queue(redis: Redis, prefix: str, pool: str, tickets: list[tuple[str, str]]) -> None:
    """Queue tickets of (class, tier) in a pool with no backend, so they all stay queued."""
    scripts = Scripts(redis, Timing(lease_ttl_s=30.0, owner_ttl_s=3.0, max_scan=64))
    for cls, tier in tickets:
        ticket = Ticket(uuid.uuid4().hex, "m", "t", cls, 10, 0.0, tier, 0.0)
        result = await scripts.enqueue(PoolKeys(prefix, pool), "me", ticket, 0, 0)
        assert result.status == 1 and not result.messages


async def test_depth_is_split_by_class_and_tier_per_pool(redis: Redis, prefix: str) -> None:
    await queue(redis, prefix, "p", [("short", "interactive")] * 2 + [("long", "batch")])
    await queue(redis, prefix, "q", [("medium", "interactive")])
    depth = QueueDepth(redis, prefix, ["p", "q", "empty"])
    got = await depth.refresh()
    assert got == depth.snapshot == {
        ("p", "short", "interactive"): 2, ("p", "long", "batch"): 1, ("q", "medium", "interactive"): 1,
    }
    assert depth.totals == {"p": 3, "q": 1, "empty": 0}
    assert depth.by_class() == {"short": 2, "long": 1, "medium": 1}


async def test_past_max_scan_the_split_is_scaled_to_the_total(redis: Redis, prefix: str) -> None:
    await queue(redis, prefix, "p", [("short", "interactive")] * 6)
    depth = QueueDepth(redis, prefix, ["p"], max_scan=2)
    assert await depth.refresh() == {("p", "short", "interactive"): 6}


async def test_a_pool_added_by_a_reload_is_counted(redis: Redis, prefix: str) -> None:
    depth = QueueDepth(redis, prefix, ["p"])
    await queue(redis, prefix, "new", [("short", "batch")])
    assert await depth.refresh() == {}
    depth.add_pool("new")
    depth.add_pool("new")  # once
    assert await depth.refresh() == {("new", "short", "batch"): 1}
    assert depth.totals == {"p": 0, "new": 1}


async def test_the_loop_refreshes_on_its_own(redis: Redis, prefix: str) -> None:
    depth = QueueDepth(redis, prefix, ["p"])
    await depth.start(0.05)
    try:
        await queue(redis, prefix, "p", [("long", "interactive")])
        await eventually(lambda: depth.snapshot == {("p", "long", "interactive"): 1})
    finally:
        await depth.stop()
