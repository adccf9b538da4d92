"""A client that goes away aborts its sequence, streamed or not, running or queued."""

from __future__ import annotations

import asyncio

import httpx
from openai import AsyncOpenAI

from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.simulator.conftest import MODEL, parse_metrics, wait_for_stats

LONG = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "go on"}],
    "max_tokens": 5000,
    "ignore_eos": True,
}


async def test_closing_a_stream_aborts_and_frees_the_slot() -> None:
    with running_simulator(SimSettings(profile="fast")) as url:
        async with AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "go on"}],
                max_tokens=5000,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    break
            await stream.close()
            async with httpx.AsyncClient(base_url=url) as http:
                stats = await wait_for_stats(http, lambda s: s["aborts"] == 1 and s["running"] == 0)
                metrics = parse_metrics((await http.get("/metrics")).text)
    assert stats["completed"] == 0
    assert stats["tokens_generated"] < 5000
    assert metrics['vllm:request_success_total{finished_reason="abort",model_name="sim-model"}'] == 1


async def test_a_non_streamed_request_is_aborted_when_its_client_leaves() -> None:
    with running_simulator(SimSettings(profile="fast")) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            request = asyncio.create_task(http.post("/v1/chat/completions", json=LONG))
            await wait_for_stats(http, lambda s: s["running"] == 1)
            request.cancel()
            stats = await wait_for_stats(http, lambda s: s["aborts"] == 1 and s["running"] == 0)
    assert stats["completed"] == 0


async def test_a_queued_request_is_aborted_when_its_client_leaves() -> None:
    with running_simulator(SimSettings(profile="fast", max_num_seqs=1)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            first = asyncio.create_task(http.post("/v1/chat/completions", json=LONG))
            await wait_for_stats(http, lambda s: s["running"] == 1)
            second = asyncio.create_task(http.post("/v1/chat/completions", json=LONG))
            await wait_for_stats(http, lambda s: s["waiting"] == 1)
            second.cancel()
            stats = await wait_for_stats(http, lambda s: s["waiting"] == 0 and s["aborts"] == 1)
            assert stats["running"] == 1
            first.cancel()
            await wait_for_stats(http, lambda s: s["aborts"] == 2 and s["running"] == 0)
