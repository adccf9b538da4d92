"""Quotas per tenant and per key, enforced in Redis for every replica, answered like OpenAI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from redis.asyncio import Redis

from gateway.settings import hash_key
from scheduler.queue.keys import QuotaKeys
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL, eventually

CHAT = "/v1/chat/completions"


def chat(max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens,
            "ignore_eos": True, **extra}


def keys(*entries: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"sha256": hash_key(key), "tenant": tenant, **extra} for key, tenant, extra in entries]


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_requests_per_minute_of_a_tenant_hold_across_replicas(
    gateway_factory: Callable[..., str], sim_url: str
) -> None:
    backends = [{"name": "sim", "url": sim_url, "models": [MODEL]}]
    config = {"api_keys": keys(("k1", "t1", {}), ("k2", "t2", {})),
              "tenant_quotas": {"t1": {"requests_per_minute": 2}}}
    a, b = gateway_factory(backends, **config), gateway_factory(backends, **config)
    async with httpx.AsyncClient(timeout=30) as http:
        first = await http.post(a + CHAT, json=chat(2), headers=bearer("k1"))
        second = await http.post(b + CHAT, json=chat(2), headers=bearer("k1"))
        third = await http.post(a + CHAT, json=chat(2), headers=bearer("k1"))
        other = await http.post(a + CHAT, json=chat(2), headers=bearer("k2"))  # t2 has no quota
    assert (first.status_code, second.status_code, third.status_code, other.status_code) == (200, 200, 429, 200)
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert second.headers["x-ratelimit-remaining-requests"] == "0"
    assert second.headers["x-ratelimit-reset-requests"].endswith("s")
    assert "x-ratelimit-limit-tokens" not in first.headers  # no tokens limit: no tokens headers
    error = third.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert "t1" in error["message"] and "requests per minute" in error["message"]
    assert 1 <= int(third.headers["retry-after"]) <= 30  # one request drains in 60 / 2 s
    assert third.headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-ratelimit-limit-requests" not in other.headers


async def test_tokens_are_reserved_then_settled_to_what_was_used(
    gateway_factory: Callable[..., str], sim_url: str, redis: Redis, prefix: str
) -> None:
    """A request that predicted 1 output token and used 100 is charged 100: the next
    request's reservation then no longer fits, though it would have beside the estimate."""
    backends = [{"name": "sim", "url": sim_url, "models": [MODEL]}]
    url = gateway_factory(backends, api_keys=keys(("k1", "t1", {"quotas": {"tokens_per_minute": 120}, "trust_hints": True})))
    hint = {"x-triage-expected-tokens": "1"}
    async with httpx.AsyncClient(timeout=30) as http:
        first = await http.post(url + CHAT, json=chat(100), headers={**bearer("k1"), **hint})
        assert first.status_code == 200, first.text
        used = first.json()["usage"]["total_tokens"]
        assert used > 100
        assert first.headers["x-ratelimit-limit-tokens"] == "120"
        assert int(first.headers["x-ratelimit-remaining-tokens"]) >= 110  # it reserved a few tokens only
        q = QuotaKeys(prefix, "t1", "cfg-" + hash_key("k1")[:12])
        await eventually(lambda: _settled(redis, q))
        second = await http.post(url + CHAT, json=chat(60), headers={**bearer("k1"), "x-triage-expected-tokens": "60"})
    assert second.status_code == 429, second.text
    assert second.json()["error"]["code"] == "rate_limit_exceeded"
    assert "tokens per minute" in second.json()["error"]["message"]
    assert int(second.headers["x-ratelimit-remaining-tokens"]) < 60
    assert int(second.headers["retry-after"]) >= 1


async def _settled(redis: Redis, q: QuotaKeys) -> bool:
    return await redis.zcard(q.key_running) == 0


async def test_a_request_larger_than_the_limit_is_told_so(gateway_factory: Callable[..., str], sim_url: str) -> None:
    backends = [{"name": "sim", "url": sim_url, "models": [MODEL]}]
    url = gateway_factory(backends, default_quota={"tokens_per_minute": 50})
    async with httpx.AsyncClient(timeout=30) as http:
        resp = await http.post(url + CHAT, json=chat(200), headers={"x-triage-expected-tokens": "200"})
    assert resp.status_code == 429
    assert resp.json()["error"]["code"] == "request_too_large"
    assert "retry-after" not in resp.headers  # waiting does not help


async def test_concurrent_requests_of_a_key(gateway_factory: Callable[..., str]) -> None:
    with running_simulator(SimSettings(model=MODEL)) as sim:  # a realistic pace: a long stream stays open
        backends = [{"name": "sim", "url": sim, "models": [MODEL]}]
        url = gateway_factory(backends, api_keys=keys(("k1", "t1", {"quotas": {"concurrent": 1}})))
        async with httpx.AsyncClient(timeout=60) as http:
            async with http.stream("POST", url + CHAT, json=chat(5000, stream=True), headers=bearer("k1")) as stream:
                assert stream.status_code == 200
                async for _ in stream.aiter_bytes():
                    break  # running now
                refused = await http.post(url + CHAT, json=chat(2), headers=bearer("k1"))
            assert refused.status_code == 429
            assert "concurrent" in refused.json()["error"]["message"]

            async def admitted() -> bool:
                return (await http.post(url + CHAT, json=chat(2), headers=bearer("k1"))).status_code == 200

            await eventually(admitted, within_s=20)  # the stream's client left: its share came back
