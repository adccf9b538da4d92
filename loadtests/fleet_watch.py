"""What ``bench fleet`` watches beside the load: priority inversions seen in the queues, and
what Redis spent (``INFO cpu``, ``INFO commandstats``).

**Priority inversion** (as counted here): the queue of every pool is read whole and atomically
(``ZRANGE ... WITHSCORES``) every few milliseconds. Between two reads, a ticket that left the
queue (it was granted: the benchmark cancels nothing) while a ticket with a *better* score was
queued in both reads was granted out of order: the better ticket waited through every dispatch
in between, so the inversion spans more than one dispatch. A dispatch is atomic and walks the
queue best first, so with one model per pool and no slot reservation the count should be zero;
anything else is a bug worth a report. A ticket that leaves and comes back was dropped (its
replica's heartbeat lapsed) and queued again, not granted: it is taken out of the count.
The reads go to a replica of the server (``bench fleet`` starts one), so they cost the
measured server nothing; a replica applies the master's writes in order, so each read is a
state the master was in.
"""

from __future__ import annotations

import asyncio
import bisect
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys


@dataclass(slots=True)
class Inversions:
    grants_seen: int = 0  # tickets seen leaving a queue between two reads (and not coming back)
    inverted: int = 0  # of those, granted while a better-scored ticket stayed queued
    overtaken_pairs: int = 0  # (granted, better ticket left waiting) pairs
    worst_overtaken: int = 0  # the most better tickets one grant jumped
    requeued: int = 0  # tickets that left and came back (dropped, then queued again): no grant
    reads: int = 0
    max_queued: int = 0
    _left: dict[bytes, int] = field(default_factory=dict, repr=False)  # ticket -> better ones it passed

    def observe(self, before: dict[bytes, float], after: dict[bytes, float]) -> None:
        self.reads += 1
        self.max_queued = max(self.max_queued, len(after))
        for ticket in after.keys() & self._left.keys():
            # it left without a grant: a dispatch drops the ticket of a replica whose heartbeat
            # lapsed, and that replica queues it again (same id, same score)
            passed = self._left.pop(ticket)
            self.requeued += 1
            self.grants_seen -= 1
            if passed:
                self.inverted -= 1
                self.overtaken_pairs -= passed
        stayed = sorted(score for ticket, score in before.items() if ticket in after)
        for ticket, score in before.items():
            if ticket in after:
                continue
            self.grants_seen += 1
            better = bisect.bisect_left(stayed, score)
            self._left[ticket] = better
            if better:
                self.inverted += 1
                self.overtaken_pairs += better
                self.worst_overtaken = max(self.worst_overtaken, better)

    def add(self, other: Inversions) -> None:
        self.grants_seen += other.grants_seen
        self.inverted += other.inverted
        self.overtaken_pairs += other.overtaken_pairs
        self.worst_overtaken = max(self.worst_overtaken, other.worst_overtaken)
        self.requeued += other.requeued
        self.reads = max(self.reads, other.reads)
        self.max_queued = max(self.max_queued, other.max_queued)


@dataclass(slots=True)
class QueueWatch:
    """Reads every pool's queue each ``interval_s`` until stopped."""

    redis: Redis
    prefix: str
    pools: list[str]
    interval_s: float = 0.02
    per_pool: dict[str, Inversions] = field(default_factory=dict)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        keys = [PoolKeys(self.prefix, p).queue for p in self.pools]
        self.per_pool = {p: Inversions() for p in self.pools}
        last: list[dict[bytes, float]] | None = None
        while not self._stop.is_set():
            async with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.zrange(key, 0, -1, withscores=True)
                now = [dict(rows) for rows in await pipe.execute()]
            if last is not None:
                for pool, before, after in zip(self.pools, last, now, strict=True):
                    self.per_pool[pool].observe(before, after)
            last = now
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            except TimeoutError:
                pass

    def stop(self) -> None:
        self._stop.set()

    def total(self) -> Inversions:
        out = Inversions()
        for one in self.per_pool.values():
            out.add(one)
        return out


async def server_counters(redis: Redis) -> dict[str, Any]:
    """CPU seconds the server used so far, and calls / microseconds per command."""
    cpu = await redis.info("cpu")
    stats = await redis.info("commandstats")
    commands = {
        key.removeprefix("cmdstat_"): (int(v.get("calls", 0)), int(v.get("usec", 0)))
        for key, v in stats.items() if key.startswith("cmdstat_") and isinstance(v, dict)
    }
    return {"cpu_s": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), "commands": commands}


def _calls(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    calls: dict[str, int] = {}
    usec: dict[str, int] = {}
    for name, (n, us) in after["commands"].items():
        n0, us0 = before["commands"].get(name, (0, 0))
        if n - n0 > 0:
            calls[name], usec[name] = n - n0, us - us0
    return calls, usec


_OURS = {"zrange", "info"}  # the watcher's reads and our own INFO: never the gateway's


def idle_rates(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, Any]:
    """What Redis spends per second with nobody sending requests: heartbeats, and every
    replica publishing every backend each probe round (each publish is a script that
    dispatches)."""
    calls, usec = _calls(before, after)
    watch_s = sum(usec.get(n, 0) for n in _OURS) / 1e6
    return {
        "seconds": round(seconds, 2),
        "cpu_s_per_s": (after["cpu_s"] - before["cpu_s"] - watch_s) / seconds,
        "calls_per_s": {n: c / seconds for n, c in calls.items() if n not in _OURS},
    }


def server_delta(before: dict[str, Any], after: dict[str, Any], requests: int, wall_s: float,
                 idle: dict[str, Any] | None = None) -> dict[str, Any]:
    """Redis's cost per request over the run. ``zrange`` is the watcher's (the gateway never
    reads a whole queue) and ``info`` is ours: both are left out. With ``idle`` (from
    :func:`idle_rates`), the ``net`` figures also take out what the background work would
    have cost over the same time, leaving what the requests themselves cost."""
    calls, usec = _calls(before, after)
    cpu_s = after["cpu_s"] - before["cpu_s"]
    watch_s = sum(usec.get(n, 0) for n in _OURS) / 1e6
    gateway_calls = {n: c for n, c in calls.items() if n not in _OURS}
    scripts = sum(c for n, c in gateway_calls.items() if n in ("evalsha", "eval"))
    per = max(requests, 1)
    out = {
        "redis_cpu_s": round(cpu_s, 3),
        "redis_cpu_watch_s": round(watch_s, 3),
        "redis_cpu_ms_per_request": round((cpu_s - watch_s) * 1000 / per, 4),
        "redis_core_share": round((cpu_s - watch_s) / wall_s, 4) if wall_s > 0 else None,
        "redis_script_usec_per_request": round(  # time inside EVALSHA (its commands included)
            sum(us for n, us in usec.items() if n in ("evalsha", "eval")) / per, 1),
        "redis_commands_per_request": round(sum(gateway_calls.values()) / per, 2),
        "redis_scripts_per_request": round(scripts / per, 2),
        "redis_calls": dict(sorted(gateway_calls.items())),
    }
    if idle is not None:
        bg_cpu = idle["cpu_s_per_s"] * wall_s
        bg_calls = {n: r * wall_s for n, r in idle["calls_per_s"].items()}
        net_calls = sum(gateway_calls.values()) - sum(bg_calls.values())
        net_scripts = scripts - sum(v for n, v in bg_calls.items() if n in ("evalsha", "eval"))
        out.update({
            "idle": {"seconds": idle["seconds"], "redis_core_share": round(idle["cpu_s_per_s"], 4),
                     "commands_per_s": round(sum(idle["calls_per_s"].values()), 1)},
            "net_redis_cpu_ms_per_request": round((cpu_s - watch_s - bg_cpu) * 1000 / per, 4),
            "net_redis_commands_per_request": round(net_calls / per, 2),
            "net_redis_scripts_per_request": round(net_scripts / per, 2),
        })
    return out
