"""Queue depth per pool, class and tier, read from the shared queue in Redis.

The queue is global (every replica's tickets are in it), so its depth is read
from Redis, not counted locally: ``ZCARD`` of the pool's queue for the total and
the queued tickets' packed records (``P:tickets``, which holds queued tickets
only) for the split by class and tier. Metric callbacks are synchronous and may
run on the exporter's thread, so they read the last ``snapshot``; ``refresh`` runs
before each scrape, before ``/admin/stats`` answers and every ``interval_s`` for
the OTLP exporter. A refresh is two commands per pool and reads at most
``max_scan`` records; past that the split is scaled from the records read.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from scheduler import tasks
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import parse_ticket

log = logging.getLogger("triage.telemetry")

Depth = dict[tuple[str, str, str], int]  # (pool, class, tier) -> queued tickets


class QueueDepth:
    def __init__(self, redis: Redis, prefix: str, pools: Iterable[str], max_scan: int = 10_000) -> None:
        self._redis = redis
        self._prefix = prefix
        self._keys = [PoolKeys(prefix, p) for p in sorted(pools)]
        self._max_scan = max_scan
        self.snapshot: Depth = {}
        self.totals: dict[str, int] = {}
        self._loop: tasks.Periodic | None = None

    def add_pool(self, pool: str) -> None:
        """A pool a reloaded config named."""
        if all(k.pool != pool for k in self._keys):
            self._keys.append(PoolKeys(self._prefix, pool))

    async def refresh(self) -> Depth:
        depth: Depth = {}
        totals: dict[str, int] = {}
        try:
            for keys in self._keys:
                total = int(await self._redis.zcard(keys.queue))
                totals[keys.pool] = total
                if total == 0:
                    continue
                counts: Counter[tuple[str, str]] = Counter()
                async for _, packed in self._redis.hscan_iter(keys.tickets, count=1000):
                    ticket = parse_ticket(packed)
                    counts[(ticket.cls, ticket.tier)] += 1
                    if counts.total() >= self._max_scan:
                        break
                read = counts.total()
                for (cls, tier), n in counts.items():
                    depth[(keys.pool, cls, tier)] = round(n * total / read) if read else 0
        except RedisError as exc:
            log.warning("queue depth: %s", exc)
            return self.snapshot
        self.snapshot, self.totals = depth, totals
        return depth

    def by_class(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for (_, cls, _), n in self.snapshot.items():
            out[cls] += n
        return dict(out)

    async def start(self, interval_s: float) -> None:
        self._loop = tasks.Periodic(interval_s, self.refresh, "queue depth", at_once=True, log=log)
        self._loop.start()

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()
