"""A backend's overload answer (429/503 before the first byte) is backpressure: the
request waits again at the front of the queue while that backend cools down for its
Retry-After, and the client sees our own 429/503 (with Retry-After) only when its
deadline passes or no backend can take it before then."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from tests.e2e.faults.scripted import RATE_LIMITED, VLLM_FULL, Answer, refuse, scripted_backend
from tests.support import MODEL, eventually

CHAT = "/v1/chat/completions"


def chat(stream: bool = False) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "stream": stream}


def backend(name: str, url: str) -> dict[str, object]:
    return {"name": name, "url": url, "models": [MODEL], "max_concurrency": 4, "adaptive": False}


async def nothing_held(redis: Redis, prefix: str, *backends: str) -> bool:
    """No slot (of these backends), lease or ticket left in the pool."""
    keys = PoolKeys(prefix, "default")
    for name in backends:
        if await readback.busy(redis, keys, name) != 0:
            return False
    return (await redis.hlen(keys.lease) == 0
            and await redis.zcard(keys.queue) == 0 and await redis.hlen(keys.tickets) == 0)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_full_vllm_queue_is_absorbed_and_the_request_served(
    gateway_factory: Callable[..., str], redis: Redis, prefix: str, stream: bool
) -> None:
    with scripted_backend(refuse(503, VLLM_FULL), Answer()) as vllm:
        gw = gateway_factory([backend("vllm", vllm.url)], overload_cooldown_s=0.2)
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            resp = await http.post(CHAT, json=chat(stream))
            assert resp.status_code == 200, resp.text
            if stream:
                assert '"content":"Hi"' in resp.text and resp.text.rstrip().endswith("data: [DONE]")
            else:
                assert resp.json()["choices"][0]["message"]["content"] == "Hi"
            assert vllm.posts == 2  # refused once, then served
            await eventually(lambda: nothing_held(redis, prefix, "vllm"))


@pytest.mark.parametrize("retry_after", ["seconds", "http-date"])
async def test_a_rate_limiter_s_retry_after_is_a_cool_down(
    gateway_factory: Callable[..., str], redis: Redis, prefix: str, retry_after: str
) -> None:
    """Nothing reaches the backend inside the window its Retry-After asked for, by the
    backend's own count; the request is served after it."""
    refusal = refuse(429, RATE_LIMITED, "2", window_s=1.5)
    if retry_after == "http-date":  # whole seconds: 3 s ahead is at least 2 s ahead
        refusal = replace(refusal, retry_after=None, retry_at_s=3.0)
    with scripted_backend(refusal, Answer()) as tgi:
        gw = gateway_factory([backend("tgi", tgi.url)])
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            resp = await http.post(CHAT, json=chat())
            assert resp.status_code == 200, resp.text
            assert tgi.posts == 2 and tgi.early == 0
            await eventually(lambda: nothing_held(redis, prefix, "tgi"))


async def test_a_cooling_backend_gets_nothing_while_another_serves(
    gateway_factory: Callable[..., str], redis: Redis, prefix: str
) -> None:
    with scripted_backend(refuse(429, RATE_LIMITED, "3600")) as limited, scripted_backend(Answer()) as other:
        preferred = {**backend("limited", limited.url), "weight": 100}  # the pick while it is free
        gw = gateway_factory([preferred, backend("other", other.url)], overload_cooldown_max_s=120)
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            for _ in range(6):
                resp = await http.post(CHAT, json=chat())
                assert resp.status_code == 200, resp.text
                assert resp.headers["x-triage-backend"] == "other"
            assert limited.posts == 1  # the one refusal, then nothing while it cools
            view = {b["name"]: b for b in (await http.get("/admin/backends")).json()["backends"]}
        assert view["limited"]["cooling_s"] > 100  # Retry-After 3600, bounded by the max
        await eventually(lambda: nothing_held(redis, prefix, "limited", "other"))


@pytest.mark.parametrize(("status", "body"), [(503, VLLM_FULL), (429, RATE_LIMITED)])
async def test_past_its_deadline_the_client_gets_our_error_with_retry_after(
    gateway_factory: Callable[..., str], redis: Redis, prefix: str, status: int, body: bytes
) -> None:
    with scripted_backend(refuse(status, body)) as full:
        gw = gateway_factory([backend("full", full.url)], overload_cooldown_s=0.2)
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            resp = await http.post(CHAT, json=chat(), headers={"x-triage-timeout-ms": "1500"})
            assert resp.status_code == status, resp.text
            error = resp.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["code"] == "backend_overloaded"
            assert int(resp.headers["retry-after"]) >= 1
            assert full.posts >= 2  # it was tried again before the deadline
            await eventually(lambda: nothing_held(redis, prefix, "full"))


async def test_a_cool_down_past_the_deadline_is_answered_at_once(
    gateway_factory: Callable[..., str], redis: Redis, prefix: str
) -> None:
    with scripted_backend(refuse(429, RATE_LIMITED, "30")) as limited:
        gw = gateway_factory([backend("limited", limited.url)])
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            resp = await http.post(CHAT, json=chat(stream=True), headers={"x-triage-timeout-ms": "5000"})
            assert resp.status_code == 429, resp.text
            assert resp.json()["error"]["code"] == "backend_overloaded"
            assert 25 <= int(resp.headers["retry-after"]) <= 30  # what is left of the cool-down
            assert limited.posts == 1
            await eventually(lambda: nothing_held(redis, prefix, "limited"))


async def test_a_stream_queued_past_its_headers_survives_an_overload_and_learns_its_queue_time(
    gateway_factory: Callable[..., str], redis: Redis, prefix: str
) -> None:
    """One slot, held by a first stream: the second gets its 200 and queue comments,
    then a 503 from the backend, waits again, and is served; its queue time comes as a
    comment before [DONE]."""
    release = threading.Event()
    script = (Answer(hold=release), refuse(503, VLLM_FULL), Answer())
    with scripted_backend(*script) as vllm:
        one = {"name": "vllm", "url": vllm.url, "models": [MODEL], "max_concurrency": 1, "adaptive": False}
        gw = gateway_factory([one], overload_cooldown_s=0.2)
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            async with http.stream("POST", CHAT, json=chat(True)) as first:
                assert first.status_code == 200
                async with http.stream("POST", CHAT, json=chat(True)) as second:
                    assert second.status_code == 200  # its headers came while it was queued
                    assert "x-triage-queue-ms" not in second.headers
                    release.set()
                    await first.aread()
                    lines = [line async for line in second.aiter_lines() if line]
        assert any(line.startswith(": queued") for line in lines)
        assert '"content":"Hi"' in "".join(lines)
        assert lines[-1] == "data: [DONE]"
        assert lines[-2].startswith(": x-triage-queue-ms=") and float(lines[-2].split("=")[1]) > 0
        assert vllm.posts == 3
        await eventually(lambda: nothing_held(redis, prefix, "vllm"))


async def test_a_backend_error_reaches_the_client_in_openai_shape_without_internals(
    gateway_factory: Callable[..., str],
) -> None:
    traceback = b'Traceback (most recent call last):\n  File "/srv/app.py", line 3, in f\nKeyError: secret\n'
    tgi_error = orjson.dumps({"error": "Input validation error: `inputs` must have less than 4096 tokens",
                              "error_type": "validation"})
    with scripted_backend(refuse(500, traceback), refuse(422, tgi_error), refuse(400, b"x" * 100_000)) as bad:
        gw = gateway_factory([backend("bad", bad.url)])
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            crash = await http.post(CHAT, json=chat())
            invalid = await http.post(CHAT, json=chat(stream=True))
            huge = await http.post(CHAT, json=chat())
    assert crash.status_code == 500
    assert crash.json()["error"]["type"] == "upstream_error"
    assert "Traceback" not in crash.text and "secret" not in crash.text and "/srv" not in crash.text
    assert invalid.status_code == 422
    assert invalid.json()["error"]["message"].startswith("Input validation error")
    assert invalid.json()["error"]["type"] == "validation"
    assert huge.status_code == 400 and len(huge.content) < 2048
    for resp in (crash, invalid, huge):
        assert set(resp.json()["error"]) == {"message", "type", "param", "code"}
