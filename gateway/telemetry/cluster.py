"""The cluster-wide view: every replica's stats window, summed.

Each replica publishes its window (``WindowStats.window``: counts and latency samples
of the last minute, and its per-second timeline) to Redis every ``stats_publish_s``,
with a TTL of three periods (``stats.lua``), so a replica that stops drops out of the
sum by itself. ``view`` reads the others' windows and adds this replica's live one:
counts add, samples pool (percentiles are then computed over all of them, exactly as
for one replica), timelines add per wall-clock second. The answer names the replicas
it summed.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from redis.asyncio import Redis

from gateway.telemetry.stats import WindowStats, summarize
from scheduler import tasks
from scheduler.queue.keys import StatsKeys
from scheduler.queue.scripts import StatsScripts

log = logging.getLogger(__name__)

MAX_SAMPLES = 1024  # per class and kind published: enough for a p99 of the minute


class ClusterStats:
    def __init__(self, redis: Redis, prefix: str, owner: str, stats: WindowStats, every_s: float = 2.0) -> None:
        self._redis = redis
        self._keys = StatsKeys(prefix)
        self._scripts = StatsScripts(redis)
        self.owner = owner
        self.stats = stats
        self.every_s = every_s
        self._publishing = tasks.Periodic(every_s, self.publish, "stats publish", at_once=True, log=log)

    def own(self) -> dict[str, Any]:
        """This replica's window as it is published."""
        classes = self.stats.window()
        for entry in classes.values():
            for kind in ("ttft", "tpot", "queue"):
                entry[kind] = [round(v, 6) for v in entry[kind][-MAX_SAMPLES:]]
        return {"replica": self.owner, "time": time.time(), "window_s": self.stats.window_s, "classes": classes,
                "timeline": self.stats.timeline()}

    async def publish(self) -> None:
        await self._scripts.publish(self._keys, self.owner, orjson.dumps(self.own()), 3 * self.every_s)

    async def windows(self) -> list[dict[str, Any]]:
        """The live windows of every replica: the others' as last published, this one's now."""
        raw_members: list[bytes] = await self._redis.zrange(self._keys.replicas, 0, -1)  # type: ignore[assignment]
        members = [m.decode() for m in raw_members]
        others = [m for m in members if m != self.owner]
        raw = await self._redis.mget([self._keys.replica(m) for m in others]) if others else []
        found = [orjson.loads(r) for r in raw if r is not None]
        return [self.own(), *found]

    async def view(self) -> dict[str, Any]:
        """``/admin/stats?scope=cluster``: the classes and the timeline of all replicas summed."""
        return merge(await self.windows(), self.stats.window_s)

    async def start(self) -> None:
        self._publishing.start()

    async def stop(self) -> None:
        await self._publishing.stop()


def merge(windows: list[dict[str, Any]], window_s: int) -> dict[str, Any]:
    """Sum replicas' windows: counts add, samples pool, timelines add per wall second."""
    classes: dict[str, dict[str, Any]] = {}
    per_second: dict[int, list[int]] = {}
    for w in windows:
        for cls, entry in w["classes"].items():
            into = classes.setdefault(cls, {"requests": 0, "errors": 0, "rejections": 0, "output_tokens": 0,
                                            "pauses": 0, "ttft": [], "tpot": [], "queue": [], "samples": 0})
            for name in ("requests", "errors", "rejections", "output_tokens", "pauses", "samples"):
                into[name] += entry[name]
            for kind in ("ttft", "tpot", "queue"):
                into[kind].extend(entry[kind])
        published = int(w["time"])
        for point in w["timeline"]:
            slot = per_second.setdefault(published - point["ago_s"], [0, 0])
            slot[0] += point["requests"]
            slot[1] += point["output_tokens"]
    now = int(time.time())
    timeline = [
        {"ago_s": now - second, "requests": per_second.get(second, [0, 0])[0],
         "output_tokens": per_second.get(second, [0, 0])[1]}
        for second in range(now - window_s + 1, now + 1)
    ]
    return {
        "replicas": sorted(w["replica"] for w in windows),
        "classes": {cls: summarize(entry, window_s) for cls, entry in sorted(classes.items())},
        "timeline": timeline,
    }
