"""Redis stops and comes back (empty) mid-load: running streams finish, new requests
get a clear 503 meanwhile, the gateway reconnects by itself, queued requests are
queued again, and no backend slot leaks. Redis is a real server process."""

from __future__ import annotations

import asyncio

import httpx
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.embedded import EmbeddedRedis, free_port
from gateway.settings import Settings
from scheduler.keys import PoolKeys
from tests.faults.conftest import MODEL, chat, stream_tokens
from tests.support import eventually, running_app


async def test_redis_restart_mid_load(sim: str) -> None:
    port = free_port()
    server = EmbeddedRedis(port)
    url = server.start()
    prefix = "restart"
    keys = PoolKeys(prefix, "default")
    settings = Settings.model_validate({
        "redis_url": url, "key_prefix": prefix, "heartbeat_s": 0.3, "probe_interval_s": 0.3,
        "backends": [{"name": "sim", "url": sim, "models": [MODEL], "max_concurrency": 2, "adaptive": False}],
    })
    try:
        with running_app(create_app(settings)) as gw:
            async with httpx.AsyncClient(timeout=60) as http:
                running = [asyncio.create_task(stream_tokens(http, gw, 1500)) for _ in range(2)]
                queued = asyncio.create_task(stream_tokens(http, gw, 10))
                probe = Redis.from_url(url)
                await eventually(lambda: queue_len_is(probe, keys, 1))
                await probe.aclose()

                server.stop()  # Redis is gone, with everything it held
                resp = await http.post(f"{gw}/v1/chat/completions", json=chat(3, stream=False))
                assert resp.status_code == 503
                assert resp.json()["error"]["code"] == "scheduler_unavailable"
                assert "Redis" in resp.json()["error"]["message"]
                assert (await http.get(f"{gw}/ready")).json()["redis"] is False

                server = EmbeddedRedis(port)
                server.start()  # back, empty
                # streams that were running finish; the queued request is queued again and runs
                assert await asyncio.gather(*running) == [1500, 1500]
                assert await queued == 10
                resp = await http.post(f"{gw}/v1/chat/completions", json=chat(3, stream=False))
                assert resp.status_code == 200
                probe = Redis.from_url(url)
                await eventually(lambda: busy_is(probe, keys, 0))  # no slot leaked
                await probe.aclose()
    finally:
        server.stop()


async def queue_len_is(redis: Redis, keys: PoolKeys, n: int) -> bool:
    return int(await redis.zcard(keys.queue)) == n


async def busy_is(redis: Redis, keys: PoolKeys, n: int) -> bool:
    return int(await redis.hget(keys.busy, "sim") or 0) == n
