"""The gateway teaches its length predictor from real replies and shares it in Redis."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from redis.asyncio import Redis

from scheduler.keys import predictor_key
from tests.gateway.conftest import MODEL
from tests.support import eventually


async def test_observed_lengths_reach_the_shared_predictor(
    gateway_factory: Callable[..., str], sim_url: str, redis: Redis, prefix: str
) -> None:
    gw = gateway_factory(
        [{"name": "sim", "url": sim_url, "models": [MODEL]}], predictor_sync_s=0.2
    )
    async with httpx.AsyncClient(base_url=gw, timeout=60) as http:
        for i in range(6):
            # natural lengths (no ignore_eos), far below the cap: each one is learned
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"tell me {i}"}], "max_tokens": 4000}
            assert (await http.post("/v1/chat/completions", json=body)).status_code == 200
    key = predictor_key("default", prefix)

    async def shared() -> bool:
        return int(await redis.hlen(key)) > 0

    await eventually(shared)


async def test_prior_predictor_can_be_chosen(gateway_factory: Callable[..., str], sim_url: str) -> None:
    gw = gateway_factory([{"name": "sim", "url": sim_url, "models": [MODEL]}], predictor="prior")
    async with httpx.AsyncClient(base_url=gw, timeout=60) as http:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        resp = await http.post("/v1/chat/completions", json=body, headers={"x-triage-expected-tokens": "5000"})
    assert resp.status_code == 200
    assert resp.headers["x-triage-class"] == "long"
