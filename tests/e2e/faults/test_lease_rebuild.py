"""Redis loses its data while a long stream runs: the replica's heartbeat rebuilds the
lease, and the rebuilt lease is the one the grant wrote, so a short request can still
pause the long stream (served while it is paused; the long one resumes and ends)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.settings import Settings
from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from tests.support import MODEL, eventually, progress_past, running_app

LONG = {"x-triage-expected-tokens": "1000"}  # medium: it may be paused
SHORT = {"x-triage-expected-tokens": "5"}


def chat(content: str, tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


async def stream(http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as resp:
        assert resp.status_code == 200
        return b"".join([chunk async for chunk in resp.aiter_raw()])


def usage(raw: bytes) -> list[dict[str, Any]]:
    chunks = [orjson.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    return [c["usage"] for c in chunks if c.get("usage")]


async def rebuilt(redis: Redis, keys: PoolKeys, lease: bytes) -> bool:
    """The lease is back, with its slot, on a backend the probe registered again (it can
    resume; this replica can call it), and its progress is reported again."""
    b = (await readback.backend_states(redis, keys)).get("sim")
    return (
        b is not None and b.limit == 1 and b.resume and b.busy == 1
        and await redis.hexists(keys.lease, lease) and await redis.hlen(keys.reach) == 1
        and await progress_past(redis, keys, 4)
    )


async def test_a_lease_rebuilt_after_redis_lost_its_data_can_be_paused(
    sim: str, embedded_redis_url: str, prefix: str,
) -> None:
    # this process's own server: flushing it touches no one else's keys
    settings = Settings.model_validate({
        "redis_url": embedded_redis_url, "key_prefix": prefix, "heartbeat_s": 0.05, "probe_interval_s": 0.1,
        "preempt": True, "quantum_tokens": 4, "max_pauses": 2,
        "backends": [{"name": "sim", "url": sim, "models": [MODEL], "max_concurrency": 1, "adaptive": False,
                      "resume": "vllm"}],
    })
    keys = PoolKeys(prefix, "default")
    redis = Redis.from_url(embedded_redis_url)
    try:
        with running_app(create_app(settings)) as gw:
            async with httpx.AsyncClient(timeout=120) as http:
                victim = asyncio.create_task(stream(http, gw, chat("write me a long story", 2000), LONG))
                await eventually(lambda: progress_past(redis, keys, 4), within_s=60)
                [lease] = await redis.hkeys(keys.lease)
                await redis.flushdb()  # Redis lost everything: a new epoch
                await eventually(lambda: rebuilt(redis, keys, lease), within_s=30)
                short = await stream(http, gw, chat("a quick question", 5), SHORT)
                assert int(await redis.hget(keys.stats, "paused") or 0) == 1  # it took the long one's slot
                assert not victim.done()  # served while the long one waits, paused
                raw = await victim
        assert b"data: [DONE]" in short
        assert b": paused" in raw and raw.endswith(b"data: [DONE]\n\n")
        assert [u["completion_tokens"] for u in usage(raw)] == [2000]  # resumed to its end, usage summed
    finally:
        await redis.aclose()
