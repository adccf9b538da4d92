"""Redis stops and comes back (empty) mid-load: running streams finish, new requests
get a clear 503 meanwhile, the gateway reconnects by itself, queued requests are
queued again, and no backend slot leaks. Redis is a real server process."""

from __future__ import annotations

import asyncio

import httpx
from redis.asyncio import Redis

from gateway.app import create_app, shared_redis
from gateway.server.embedded import EmbeddedRedis, free_port
from gateway.settings import Settings
from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from tests.e2e.faults.conftest import MODEL, chat, stream_tokens
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
                probe = Redis.from_url(url)
                await eventually(lambda: busy_is(probe, keys, 2))  # both slots taken: the next one queues
                queued = asyncio.create_task(stream_tokens(http, gw, 10))
                await eventually(lambda: queue_len_is(probe, keys, 1))
                await probe.aclose()

                server.stop()  # Redis is gone, with everything it held
                resp = await http.post(f"{gw}/v1/chat/completions", json=chat(3, stream=False))
                assert resp.status_code == 503
                assert resp.json()["error"]["code"] == "scheduler_unavailable"
                assert "Redis" in resp.json()["error"]["message"]
                assert "127.0.0.1" not in resp.text and str(port) not in resp.text  # no addresses
                assert (await http.get(f"{gw}/ready")).json()["redis"] is False

                server = EmbeddedRedis(port)
                server.start()  # back, empty
                # streams that were running finish; the queued request is queued again and runs
                assert await asyncio.gather(*running) == [1500, 1500]
                assert await queued == 10
                resp = await http.post(f"{gw}/v1/chat/completions", json=chat(3, stream=False))
                assert resp.status_code == 200, resp.text
                probe = Redis.from_url(url)
                await eventually(lambda: busy_is(probe, keys, 0))  # no slot leaked
                await probe.aclose()
    finally:
        server.stop()


async def test_a_queued_stream_keeps_its_comments_while_redis_is_away(sim: str) -> None:
    """Its place cannot be read while Redis is away: the stream gets bare keep-alive
    comments instead of being cut, and relays once Redis is back and a slot frees."""
    port = free_port()
    server = EmbeddedRedis(port)
    url = server.start()
    settings = Settings.model_validate({
        "redis_url": url, "key_prefix": "away", "heartbeat_s": 0.3, "probe_interval_s": 0.3,
        "backends": [{"name": "sim", "url": sim, "models": [MODEL], "max_concurrency": 1, "adaptive": False}],
    })
    try:
        with running_app(create_app(settings)) as gw:
            async with httpx.AsyncClient(timeout=60) as http:
                running = asyncio.create_task(stream_tokens(http, gw, 1500))
                probe = Redis.from_url(url)
                await eventually(lambda: busy_is(probe, PoolKeys("away", "default"), 1))
                await probe.aclose()
                async with http.stream("POST", f"{gw}/v1/chat/completions", json=chat(10)) as resp:
                    lines = resp.aiter_lines()
                    assert (await anext(lines)).startswith(": queued position=1")
                    server.stop()
                    for _ in range(10):  # the next tick, or one more if it was already on its way
                        line = await anext(lines)
                        if line == ": queued":
                            break
                        assert line == "" or line.startswith(": queued position=")
                    else:
                        raise AssertionError("no keep-alive comment while Redis was away")
                    server = EmbeddedRedis(port)
                    server.start()
                    rest = [line async for line in lines]
                assert await running == 1500
        content = [d for d in rest if d.startswith("data: {") and '"content":"' in d and '"content":""' not in d]
        assert len(content) == 10
        assert [line for line in rest if line][-1] == "data: [DONE]"
    finally:
        server.stop()


async def queue_len_is(redis: Redis, keys: PoolKeys, n: int) -> bool:
    return int(await redis.zcard(keys.queue)) == n


async def busy_is(redis: Redis, keys: PoolKeys, n: int) -> bool:
    return await readback.busy(redis, keys, "sim") == n


async def test_a_command_cut_off_mid_flight_is_retried_on_a_fresh_connection(
    any_redis_url: str, prefix: str, redis: Redis
) -> None:
    """The gateway's client retries a command whose connection dies under it (a Redis
    restart, a proxy dropping idle links) instead of failing the request it serves."""
    name = f"{prefix}-client"
    client = shared_redis(any_redis_url, name, max_connections=1)
    other = Redis.from_url(any_redis_url)
    key = f"{prefix}:cut"
    try:
        blocked = asyncio.create_task(client.blpop([key], timeout=10))
        await eventually(lambda: blocked_on_blpop(other, name))
        assert await kill_by_name(other, name) == 1
        await other.rpush(key, b"after")
        assert await blocked == (key.encode(), b"after")
    finally:
        await client.aclose()
        await other.aclose()
        await redis.delete(key)


async def blocked_on_blpop(redis: Redis, name: str) -> bool:
    return any(c["name"] == name and c["cmd"] == "blpop" for c in await redis.client_list())


async def kill_by_name(redis: Redis, name: str) -> int:
    ids = [c["id"] for c in await redis.client_list() if c["name"] == name]
    return sum([int(await redis.client_kill_filter(_id=i)) for i in ids])
