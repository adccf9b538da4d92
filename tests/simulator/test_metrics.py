"""/metrics and /sim/stats agree with what clients received."""

from __future__ import annotations

import asyncio

import httpx
from openai import AsyncOpenAI

from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.simulator.conftest import MODEL, parse_metrics

LABEL = 'model_name="sim-model"'


async def test_token_counters_match_usage() -> None:
    with running_simulator(SimSettings(profile="fast")) as url:
        async with AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
            usages: list[tuple[int, int]] = []

            async def plain(i: int) -> None:
                r = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": f"q{i} " * i}]
                )
                assert r.usage is not None
                usages.append((r.usage.prompt_tokens, r.usage.completion_tokens))

            async def streamed(i: int) -> None:
                stream = await client.completions.create(
                    model=MODEL,
                    prompt=f"p{i}",
                    max_tokens=20,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                tokens = 0
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].text:
                        tokens += 1
                    elif chunk.usage is not None:
                        assert chunk.usage.completion_tokens == tokens
                        usages.append((chunk.usage.prompt_tokens, tokens))

            await asyncio.gather(*(plain(i) for i in range(6)), *(streamed(i) for i in range(6)))

        async with httpx.AsyncClient(base_url=url) as http:
            response = await http.get("/metrics")
            stats = (await http.get("/sim/stats")).json()
            reset = (await http.post("/sim/reset")).json()

    assert response.headers["content-type"].startswith("text/plain")
    m = parse_metrics(response.text)
    assert m[f"vllm:prompt_tokens_total{{{LABEL}}}"] == sum(p for p, _ in usages)
    assert m[f"vllm:generation_tokens_total{{{LABEL}}}"] == sum(c for _, c in usages)
    done = sum(m[f'vllm:request_success_total{{finished_reason="{r}",{LABEL}}}'] for r in ("stop", "length"))
    assert done == 12
    assert m[f"vllm:time_to_first_token_seconds_count{{{LABEL}}}"] == 12
    assert m[f"vllm:e2e_request_latency_seconds_count{{{LABEL}}}"] == 12
    assert m[f'vllm:e2e_request_latency_seconds_bucket{{{LABEL},le="+Inf"}}'] == 12
    assert m[f"vllm:num_requests_running{{{LABEL}}}"] == 0
    assert m[f"vllm:kv_cache_usage_perc{{{LABEL}}}"] == 0
    assert stats["tokens_generated"] == sum(c for _, c in usages)
    assert stats["total_requests"] == stats["completed"] == 12
    assert 1 <= stats["peak_running"] <= 12
    assert reset["total_requests"] == reset["tokens_generated"] == reset["peak_running"] == 0


async def test_histogram_buckets_are_cumulative(http: httpx.AsyncClient) -> None:
    await http.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
    m = parse_metrics((await http.get("/metrics")).text)
    buckets = [v for k, v in m.items() if k.startswith("vllm:time_to_first_token_seconds_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] >= 1
