"""Every replica's stats window, published to the embedded Valkey and summed: counts add,
samples pool, timelines add per wall-clock second, and the answer names the replicas."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from gateway.telemetry.cluster import MAX_SAMPLES, ClusterStats, merge
from gateway.telemetry.stats import WindowStats
from scheduler.queue.keys import StatsKeys


def replica(redis: Redis, prefix: str, owner: str) -> ClusterStats:
    return ClusterStats(redis, prefix, owner, WindowStats(window_s=60, classes=("short",)), every_s=30)


async def test_the_cluster_view_sums_every_published_window(redis: Redis, prefix: str) -> None:
    a, b = replica(redis, prefix, "a"), replica(redis, prefix, "b")
    a.stats.completed("short", True, 10, ttft_s=0.1, tpot_s=None, queue_s=None)
    b.stats.completed("short", True, 30, ttft_s=0.3, tpot_s=None, queue_s=None)
    b.stats.completed("short", False, None, None, None, None)
    b.stats.rejected("short")
    await b.publish()

    view = await a.view()  # a's own window live, b's as published

    assert view["replicas"] == ["a", "b"]
    short = view["classes"]["short"]
    assert (short["requests"], short["errors"], short["rejections"], short["output_tokens"]) == (2, 1, 1, 40)
    assert short["ttft_p50_s"] == 0.1 and short["ttft_p99_s"] == 0.3  # pooled samples
    assert sum(p["requests"] for p in view["timeline"]) == 2
    ttl = await redis.pttl(StatsKeys(prefix).replica("b"))
    assert 0 < ttl <= 90_000  # three publishing periods: a stopped replica drops out by itself


async def test_a_replica_that_never_published_is_only_itself(redis: Redis, prefix: str) -> None:
    alone = replica(redis, prefix, "solo")
    assert [w["replica"] for w in await alone.windows()] == ["solo"]


def test_own_publishes_at_most_max_samples_per_kind(redis: Redis) -> None:
    stats = ClusterStats(redis, "p", "me", WindowStats(window_s=60))
    for i in range(MAX_SAMPLES + 5):
        stats.stats.completed("short", True, 1, ttft_s=i * 1e-7, tpot_s=None, queue_s=None)
    published = stats.own()["classes"]["short"]
    assert len(published["ttft"]) == MAX_SAMPLES and published["requests"] == MAX_SAMPLES + 5
    assert published["ttft"][-1] == pytest.approx((MAX_SAMPLES + 4) * 1e-7, abs=1e-6)  # the latest kept, rounded


def test_merge_adds_timelines_by_wall_clock_second() -> None:
    now = time.time()

    def window(name: str, published: float, ago: int, n: int) -> dict:
        return {"replica": name, "time": published, "classes": {}, "timeline": [{"ago_s": ago, "requests": n, "output_tokens": 0}]}

    # one replica published a second ago; its "0 s ago" is the other's "1 s ago"
    merged = merge([window("x", now, 1, 2), window("y", now - 1, 0, 3)], 60)
    assert merged["replicas"] == ["x", "y"]
    by_ago = {p["ago_s"]: p["requests"] for p in merged["timeline"]}
    assert sum(by_ago.values()) == 5 and max(by_ago.values()) == 5 and len(merged["timeline"]) == 60
