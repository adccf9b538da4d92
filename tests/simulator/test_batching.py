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
        async with client_for(url) as client:

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
        async with httpx.AsyncClient(base_url=url) as http:
            stats = (await http.get("/sim/stats")).json()
    assert stats["peak_running"] == 4
    assert stats["total_requests"] == stats["completed"] == 20
    assert stats["running"] == stats["waiting"] == 0


async def served_beside_a_long_one(mode: BatchingMode) -> bool:
    """Whether a short request is served while a long one streams.

    The long one starts alone; once the engine holds the short one too, the long one is read
    until the engine has generated ``steps`` more tokens (at least that many steps since the
    short one arrived, by its own counter) and the engine is asked whether the short one has
    completed. No clock: only the engine's own steps and counters.
    """
    steps = 50
    with running_simulator(SimSettings(profile="fast", mode=mode)) as url:
        async with client_for(url) as client:
            long_stream = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "long"}],
                max_tokens=30_000,  # far more steps than the test reads: it is closed, never finished
                stream=True,
                extra_body={"ignore_eos": True},
            )
            chunks = long_stream.__aiter__()

            async def next_token() -> None:
                async for chunk in chunks:
                    if chunk.choices and chunk.choices[0].delta.content:
                        return
                raise AssertionError("the long stream ended")

            await next_token()
            short = asyncio.create_task(
                client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "short"}],
                    max_tokens=3,
                    extra_body={"ignore_eos": True},
                )
            )
            async with httpx.AsyncClient(base_url=url) as http:

                async def stats() -> dict[str, int]:
                    return (await http.get("/sim/stats")).json()

                while (seen := await stats())["total_requests"] < 2:
                    await next_token()
                # the engine's own count, not the tokens read: those may have been made before
                while (now := await stats())["tokens_generated"] < seen["tokens_generated"] + steps:
                    await next_token()
                served = now["completed"] == 1
                assert now["waiting"] == (0 if served else 1)
                await long_stream.close()  # the long one is aborted; a waiting short one now runs
                reply = await short
                assert reply.usage is not None and reply.usage.completion_tokens == 3
        return served


async def test_continuous_batching_lets_a_short_request_overtake() -> None:
    assert await served_beside_a_long_one(BatchingMode.CONTINUOUS)


async def test_static_batching_makes_a_short_request_wait_for_the_batch() -> None:
    assert not await served_beside_a_long_one(BatchingMode.STATIC)
