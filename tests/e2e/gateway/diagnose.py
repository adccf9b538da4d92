"""What a multi-replica test shows when a request was never answered: each gateway's own view,
each backend's, and the pool's state in Redis (queue, tickets, leases, owners, inboxes), so a
failure says whether the request was queued, granted, running or lost."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

import httpx
from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys

T = TypeVar("T")


async def pool_state(redis: Redis, keys: PoolKeys) -> dict[str, Any]:
    owners = await redis.zrange(keys.owners, 0, -1, withscores=True)
    seconds, micros = await redis.time()
    return {
        "now": seconds + micros / 1e6,
        "queue": await redis.zrange(keys.queue, 0, -1, withscores=True),
        "tickets": await redis.hkeys(keys.tickets),
        "leases": await redis.zrange(keys.leases, 0, -1, withscores=True),
        "backends": await redis.hgetall(keys.backends),
        "owners": owners,
        "inboxes": {o: await redis.lrange(keys.inbox(o.decode()), 0, -1) for o, _ in owners},
        "owned": {o: await redis.smembers(keys.owned(o.decode())) for o, _ in owners},
    }


async def views(urls: Iterable[str], path: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=10) as http:
        for url in urls:
            try:
                seen[url] = (await http.get(f"{url}{path}")).json()
            except httpx.HTTPError as exc:
                seen[url] = repr(exc)
    return seen


async def all_answered(calls: Iterable[Awaitable[T]], *, redis: Redis, keys: PoolKeys, gateways: Iterable[str],
                       backends: Iterable[str]) -> list[T]:
    """``asyncio.gather(*calls)``; a call that times out fails the test with what every part saw."""
    try:
        return list(await asyncio.gather(*calls))
    except httpx.TimeoutException as exc:
        seen = {"pool": await pool_state(redis, keys), "gateways": await views(gateways, "/admin/stats"),
                "backends": await views(backends, "/sim/stats")}
        raise AssertionError(f"a request was never answered ({exc!r}); what each part saw: {seen}") from None
