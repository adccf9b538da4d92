"""Concurrency limits and the difference between continuous and static batching."""

from __future__ import annotations

import asyncio

import httpx
from openai import AsyncOpenAI

from simulator.profiles import BatchingMode
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.simulator.conftest import MODEL


def client_for(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)


async def test_running_never_exceeds_max_num_seqs() -> None:
    with running_simulator(SimSettings(profile="fast", max_num_seqs=4)) as url:
        client = client_for(url)

        async def one(i: int) -> int:
            r = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"request {i}"}],
                max_tokens=40,
                extra_body={"ignore_eos": True},
            )
            assert r.usage is not None
            return r.usage.completion_tokens

        assert await asyncio.gather(*(one(i) for i in range(20))) == [40] * 20
        await client.close()
        async with httpx.AsyncClient(base_url=url) as http:
            stats = (await http.get("/sim/stats")).json()
    assert stats["peak_running"] == 4
    assert stats["total_requests"] == stats["completed"] == 20
    assert stats["running"] == stats["waiting"] == 0


async def finish_order(mode: BatchingMode) -> list[str]:
    """A long request starts alone; a short one arrives once the long one streams."""
    with running_simulator(SimSettings(profile="fast", mode=mode)) as url:
        client = client_for(url)
        order: list[str] = []
        long_stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "long"}],
            max_tokens=1000,  # seconds of decoding: the short one arrives well before the end
            stream=True,
            extra_body={"ignore_eos": True},
        )
        chunks = long_stream.__aiter__()
        async for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                break

        async def drain_long() -> None:
            async for _ in chunks:
                pass
            order.append("long")

        async def short() -> None:
            await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "short"}],
                max_tokens=3,
                extra_body={"ignore_eos": True},
            )
            order.append("short")

        await asyncio.gather(drain_long(), short())
        await client.close()
        return order


async def test_continuous_batching_lets_a_short_request_overtake() -> None:
    assert await finish_order(BatchingMode.CONTINUOUS) == ["short", "long"]


async def test_static_batching_makes_a_short_request_wait_for_the_batch() -> None:
    assert await finish_order(BatchingMode.STATIC) == ["long", "short"]
