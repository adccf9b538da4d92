"""Reading the pool's backend state back from Redis (for the registry, the dashboard and tests).

The scripts keep each backend's state in one field of ``P:backends`` (``records.py``:
``BackendSlots``); this is the one place Python reads it.
"""

from __future__ import annotations

from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import BackendSlots, parse_backend, parse_progress, parse_reach


async def backend_states(redis: Redis, keys: PoolKeys) -> dict[str, BackendSlots]:
    """Every backend of the pool: name -> its state."""
    raw = await redis.hgetall(keys.backends)
    return {name.decode(): parse_backend(packed) for name, packed in raw.items()}


async def busy(redis: Redis, keys: PoolKeys, backend: str) -> int:
    """Leases held on one backend now, by every replica (0 for an unknown backend)."""
    packed = await redis.hget(keys.backends, backend)
    return parse_backend(packed).busy if packed else 0


async def reach(redis: Redis, keys: PoolKeys, owner: str) -> set[str]:
    """The backends one replica registered (and may be granted)."""
    return parse_reach(await redis.hget(keys.reach, owner))


async def progress(redis: Redis, keys: PoolKeys) -> dict[str, tuple[int, int]]:
    """lease -> (output tokens so far, prompt tokens), for the leases that may be paused."""
    return {k.decode(): parse_progress(v) for k, v in (await redis.hgetall(keys.progress)).items()}
