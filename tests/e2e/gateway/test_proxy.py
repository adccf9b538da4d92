"""Through the gateway with the official openai SDK: both endpoints, stream and not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import openai
import pytest

from tests.support import MODEL


@pytest.fixture
async def client(gateway: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0) as client:
        yield client


async def test_chat_non_streaming(client: openai.AsyncOpenAI) -> None:
    resp = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=7, extra_body={"ignore_eos": True}
    )
    assert resp.choices[0].message.content
    assert resp.usage is not None and resp.usage.completion_tokens == 7


async def test_chat_streaming_strips_usage_when_not_asked(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = [c async for c in stream]
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)  # no usage-only chunk leaked through
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text
    assert chunks[-1].choices[0].finish_reason == "length"


async def test_chat_streaming_keeps_usage_when_asked(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    chunks = [c async for c in stream]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].choices == []


async def test_completions_both_ways(client: openai.AsyncOpenAI) -> None:
    resp = await client.completions.create(model=MODEL, prompt="Once", max_tokens=4, extra_body={"ignore_eos": True})
    assert resp.usage is not None and resp.usage.completion_tokens == 4
    stream = await client.completions.create(
        model=MODEL, prompt="Once", max_tokens=4, stream=True, extra_body={"ignore_eos": True}
    )
    texts = [c.choices[0].text async for c in stream if c.choices]
    assert len([t for t in texts if t]) == 4


async def test_models_lists_backend_models(client: openai.AsyncOpenAI) -> None:
    models = await client.models.list()
    assert [m.id async for m in models] == [MODEL]


async def test_headers_on_proxied_requests(gateway: str) -> None:
    async with httpx.AsyncClient() as http:
        resp = await http.post(
            f"{gateway}/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        )
    assert resp.status_code == 200
    assert resp.headers["x-request-id"].startswith("req-")
    assert float(resp.headers["x-triage-queue-ms"]) >= 0
    assert resp.headers["x-triage-class"] == "short"


async def test_no_request_is_lost(client: openai.AsyncOpenAI) -> None:
    async def one(i: int) -> int:
        resp = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"q{i}"}], max_tokens=3 + i % 5,
            extra_body={"ignore_eos": True},
        )
        assert resp.usage is not None
        return resp.usage.completion_tokens

    results = await asyncio.gather(*(one(i) for i in range(60)))
    assert results == [3 + i % 5 for i in range(60)]


async def test_health_and_ready(gateway: str) -> None:
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{gateway}/health")).status_code == 200
        ready = await http.get(f"{gateway}/ready")
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "redis": True, "backends": True, "draining": False, "backends_down": []}


@pytest.mark.parametrize(
    ("sent", "echoed"),
    [
        ("client-abc-123", True),
        ("A" * 128, True),
        ("A" * 129, False),  # too long
        ("has space", False),
        ("tab\there", False),
        ("é", False),  # not ASCII
        ("", False),
    ],
)
async def test_a_client_s_own_request_id_is_echoed_when_valid(gateway: str, sent: str, echoed: bool) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        for stream in (False, True):
            resp = await http.post("/v1/chat/completions", json={**body, "stream": stream},
                                   headers={"x-request-id": sent.encode("utf-8")})
            assert resp.status_code == 200, resp.text
            if echoed:
                assert resp.headers["x-request-id"] == sent
                assert resp.headers["x-triage-request-id"].startswith("req-")  # ours, as the backend got it
            else:
                assert resp.headers["x-request-id"].startswith("req-")
        bad = await http.post("/v1/chat/completions", json={"model": MODEL}, headers={"x-request-id": "mine"})
        assert bad.status_code == 400 and bad.headers["x-request-id"] == "mine"
