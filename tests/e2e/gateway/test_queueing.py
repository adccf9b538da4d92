"""Queueing as a client sees it: order across replicas, queue comments, deadlines,
bounded queues, and leaving the queue (or a stream) by disconnecting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack

import httpx
import pytest
from redis.asyncio import Redis

from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL, eventually

LONG = 20_000  # tokens: holds the only slot until its client leaves


def chat(max_tokens: int, stream: bool = False, content: str = "hi") -> dict[str, object]:
    return {
        "model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
        "ignore_eos": True, "stream": stream,
    }


class Blocker:
    """Holds the backend's only slot with a long stream until released (its client leaves)."""

    def __init__(self) -> None:
        self._stack = AsyncExitStack()
        self._reader: AsyncIterator[bytes] | None = None

    async def occupy(self, gateway: str) -> None:
        client = await self._stack.enter_async_context(httpx.AsyncClient(timeout=60))
        resp = await self._stack.enter_async_context(
            client.stream("POST", f"{gateway}/v1/chat/completions", json=chat(LONG, stream=True))
        )
        assert resp.status_code == 200
        self._reader = resp.aiter_raw()  # kept: a dropped reader closes the stream
        await self._reader.__anext__()  # it is running

    async def release(self) -> None:
        await self._stack.aclose()


@pytest.fixture
def slow_sim() -> Iterator[str]:
    settings = SimSettings(profile="fast", model=MODEL, max_num_seqs=8, max_model_len=65_536, time_scale=3.0)
    with running_simulator(settings) as url:
        yield url


@pytest.fixture
def one_slot(gateway_factory: Callable[..., str], slow_sim: str) -> Callable[..., str]:
    def start(**overrides: object) -> str:
        backends = [{"name": "sim", "url": slow_sim, "models": [MODEL], "max_concurrency": 1}]
        return gateway_factory(backends, **overrides)

    return start


@pytest.fixture
async def blocker() -> AsyncIterator[Blocker]:
    b = Blocker()
    yield b
    await b.release()


async def queue_len(redis: Redis, prefix: str) -> int:
    return int(await redis.zcard(PoolKeys(prefix, "default").queue))


async def queue_is(redis: Redis, prefix: str, n: int) -> bool:
    return await queue_len(redis, prefix) == n


async def busy_is(redis: Redis, prefix: str, n: int) -> bool:
    return await readback.busy(redis, PoolKeys(prefix, "default"), "sim") == n


async def sim_stats(sim: str) -> dict:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{sim}/sim/stats")).json()


async def test_shorts_overtake_longs_across_replicas(one_slot, blocker, redis, prefix) -> None:
    a, b = one_slot(), one_slot()
    await blocker.occupy(a)
    done: list[str] = []

    async def send(gateway: str, label: str, hint: int) -> None:
        # a hint is bounded by max_tokens; the reply itself stays short (no ignore_eos)
        body = {**chat(hint + 100), "ignore_eos": False}
        async with httpx.AsyncClient(timeout=60) as http:
            resp = await http.post(
                f"{gateway}/v1/chat/completions", json=body, headers={"x-triage-expected-tokens": str(hint)}
            )
        assert resp.status_code == 200
        done.append(label)

    tasks = [asyncio.create_task(send(a, f"long{i}", 1500)) for i in range(3)]
    await eventually(lambda: queue_is(redis, prefix, 3))
    tasks += [asyncio.create_task(send(b, f"short{i}", 10)) for i in range(3)]
    await eventually(lambda: queue_is(redis, prefix, 6))
    await blocker.release()  # the slot comes back: the queue runs one at a time, in its order
    await asyncio.gather(*tasks)
    assert sorted(done[:3]) == ["short0", "short1", "short2"]
    assert sorted(done[3:]) == ["long0", "long1", "long2"]


async def test_queued_stream_shows_its_place_and_leaves_on_disconnect(one_slot, blocker, redis, prefix) -> None:
    gw = one_slot()
    await blocker.occupy(gw)
    async with httpx.AsyncClient(timeout=30) as http:
        async with http.stream("POST", f"{gw}/v1/chat/completions", json=chat(5, stream=True)) as resp:
            assert resp.status_code == 200
            lines = resp.aiter_lines()
            line = await lines.__anext__()
            assert line.startswith(": queued position=1")
            assert await queue_len(redis, prefix) == 1
    await eventually(lambda: queue_is(redis, prefix, 0))  # left the queue with its client


async def test_queued_stream_then_relays(one_slot, blocker) -> None:
    gw = one_slot()
    await blocker.occupy(gw)
    async with httpx.AsyncClient(timeout=30) as http:
        async with http.stream("POST", f"{gw}/v1/chat/completions", json=chat(4, stream=True)) as resp:
            lines = resp.aiter_lines()
            assert (await lines.__anext__()).startswith(": queued")
            await blocker.release()
            data = [line async for line in lines if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    assert sum('"content":"' in d and '"content":""' not in d for d in data) == 4


async def test_non_streaming_client_leaving_the_queue(one_slot, blocker, redis, prefix) -> None:
    gw = one_slot()
    await blocker.occupy(gw)
    async with httpx.AsyncClient() as http:
        request = asyncio.create_task(http.post(f"{gw}/v1/chat/completions", json=chat(5), timeout=30))
        await eventually(lambda: queue_is(redis, prefix, 1))
        request.cancel()  # closes the connection
        with pytest.raises(asyncio.CancelledError):
            await request
    await eventually(lambda: queue_is(redis, prefix, 0))
    await blocker.release()
    await eventually(lambda: busy_is(redis, prefix, 0))  # no slot leaked


async def test_deadline_gives_504(one_slot, blocker) -> None:
    gw = one_slot()
    await blocker.occupy(gw)
    async with httpx.AsyncClient(timeout=30) as http:
        resp = await http.post(f"{gw}/v1/chat/completions", json=chat(5), headers={"x-triage-timeout-ms": "300"})
    assert resp.status_code == 504
    assert resp.json()["error"]["code"] == "queue_timeout"


async def test_full_queue_gives_429_with_retry_after(one_slot, blocker, redis, prefix) -> None:
    gw = one_slot(max_queue=1)
    await blocker.occupy(gw)
    async with httpx.AsyncClient(timeout=30) as http:
        waiting = asyncio.create_task(http.post(f"{gw}/v1/chat/completions", json=chat(5)))
        await eventually(lambda: queue_is(redis, prefix, 1))
        resp = await http.post(
            f"{gw}/v1/chat/completions", json=chat(5), headers={"x-triage-expected-tokens": "4000"}
        )
        assert resp.status_code == 429
        assert int(resp.headers["retry-after"]) >= 1
        assert resp.json()["error"]["type"] == "rate_limit_error"
        await blocker.release()
        assert (await waiting).status_code == 200


@pytest.mark.parametrize("stream", [True, False])
async def test_client_leaving_mid_request_aborts_the_backend(one_slot, slow_sim, redis, prefix, stream) -> None:
    gw = one_slot()
    before = (await sim_stats(slow_sim))["aborts"]
    async with httpx.AsyncClient(timeout=30) as http:
        if stream:
            async with http.stream("POST", f"{gw}/v1/chat/completions", json=chat(LONG, stream=True)) as resp:
                await resp.aiter_raw().__anext__()
        else:
            request = asyncio.create_task(http.post(f"{gw}/v1/chat/completions", json=chat(LONG)))
            await eventually(lambda: sim_running(slow_sim, 1))
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
    await eventually(lambda: sim_running(slow_sim, 0))
    assert (await sim_stats(slow_sim))["aborts"] == before + 1
    await eventually(lambda: busy_is(redis, prefix, 0))


async def sim_running(sim: str, n: int) -> bool:
    return (await sim_stats(sim))["running"] == n
