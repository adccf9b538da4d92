"""Spans of one request (GenAI conventions) and W3C trace context through the gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.telemetry import semconv as sc
from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from tests.e2e.observability.conftest import MODEL, stream_chat
from tests.support import eventually, running_app

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def by_name(spans: InMemorySpanExporter) -> dict[str, object]:
    return {s.name: s for s in spans.get_finished_spans()}


async def test_streamed_chat_makes_three_spans_with_genai_attributes(
    observed: Callable[..., str], spans: InMemorySpanExporter
) -> None:
    base = observed()
    async with httpx.AsyncClient(headers={"traceparent": TRACEPARENT}) as client:
        result = await stream_chat(client, base, max_tokens=6, prompt="twelve chars")
    await eventually(lambda: "POST /v1/chat/completions" in by_name(spans))
    named = by_name(spans)
    server, queue, call = named["POST /v1/chat/completions"], named["triage.queue"], named[f"chat {MODEL}"]

    # one trace, the client's; the server span is the client's child, the others the server's
    assert {format(s.context.trace_id, "032x") for s in (server, queue, call)} == {TRACE_ID}
    assert format(server.parent.span_id, "016x") == PARENT_ID and server.parent.is_remote
    assert queue.parent.span_id == server.context.span_id
    assert call.parent.span_id == server.context.span_id
    assert (server.kind, queue.kind, call.kind) == (SpanKind.SERVER, SpanKind.INTERNAL, SpanKind.CLIENT)

    a = call.attributes
    assert a[sc.OPERATION] == "chat" and a[sc.REQUEST_MODEL] == MODEL and a[sc.PROVIDER_NAME] == "openai"
    assert a[sc.OUTPUT_TOKENS] == 6 and a[sc.INPUT_TOKENS] == result["usage"]["prompt_tokens"]
    assert a[sc.SERVER_ADDRESS] == "127.0.0.1" and isinstance(a[sc.SERVER_PORT], int)
    assert a[sc.BACKEND] == "sim"

    s = server.attributes
    assert s[sc.CLASS] == "short" and s[sc.PREDICTED] == 6 and s[sc.POLICY] == "short_first"
    assert s[sc.TENANT] == "default" and s[sc.BACKEND] == "sim" and s[sc.QUEUE_MS] >= 0
    assert s[sc.HTTP_STATUS] == 200
    events = [e.name for e in server.events]
    assert events == ["enqueued", "dispatched", "first_token"]
    first_token = server.events[2].timestamp
    assert server.start_time <= first_token <= server.end_time
    assert queue.end_time <= call.start_time + 1_000_000  # the wait ends as the call begins (1 ms of clock skew)


async def test_whole_completion_reports_finish_reasons_and_no_content_by_default(
    observed: Callable[..., str], spans: InMemorySpanExporter
) -> None:
    base = observed()
    async with httpx.AsyncClient() as client:
        resp = await client.post(
            f"{base}/v1/completions", json={"model": MODEL, "prompt": "Once", "max_tokens": 3, "ignore_eos": True}
        )
    assert resp.status_code == 200
    await eventually(lambda: "POST /v1/completions" in by_name(spans))
    call = by_name(spans)[f"text_completion {MODEL}"]
    assert call.attributes[sc.OPERATION] == "text_completion"
    assert tuple(call.attributes[sc.FINISH_REASONS]) == ("length",)
    assert call.attributes[sc.OUTPUT_TOKENS] == 3
    assert sc.INPUT_MESSAGES not in call.attributes and sc.OUTPUT_MESSAGES not in call.attributes
    # no traceparent from the client: a new trace, rooted at the gateway
    assert by_name(spans)["POST /v1/completions"].parent is None


async def test_content_is_recorded_only_when_enabled(
    observed: Callable[..., str], spans: InMemorySpanExporter
) -> None:
    base = observed(trace_content=True)
    async with httpx.AsyncClient() as client:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "secret"}], "max_tokens": 2}
        assert (await client.post(f"{base}/v1/chat/completions", json=body)).status_code == 200
    await eventually(lambda: f"chat {MODEL}" in by_name(spans))
    call = by_name(spans)[f"chat {MODEL}"]
    assert "secret" in call.attributes[sc.INPUT_MESSAGES]
    assert "content" in call.attributes[sc.OUTPUT_MESSAGES]


async def test_refused_request_marks_the_queue_span(
    observed: Callable[..., str], spans: InMemorySpanExporter, sim_url: str, redis: Redis, prefix: str
) -> None:
    # one slot and room for one in the queue: one runs, one waits, the third is refused
    base = observed(
        backends=[{"name": "sim", "url": sim_url, "models": [MODEL], "max_concurrency": 1, "adaptive": False}],
        max_queue=1,
    )
    keys = PoolKeys(prefix, "default")
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 20_000, "ignore_eos": True}
    async with httpx.AsyncClient(timeout=120) as client:
        url = f"{base}/v1/chat/completions"
        running = asyncio.ensure_future(client.post(url, json=body))
        await eventually(lambda: readback.busy(redis, keys, "sim"))
        waiting = asyncio.ensure_future(client.post(url, json=body))
        await eventually(lambda: _equals(redis.zcard(keys.queue), 1))
        refused = await client.post(url, json=body)
        assert refused.status_code == 429
        # the waiting client leaves first (the running one still holds the only slot)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await eventually(lambda: len([s for s in spans.get_finished_spans() if s.name == "triage.queue"]) == 3)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    outcomes = sorted(
        str(s.attributes.get(sc.OUTCOME)) for s in spans.get_finished_spans() if s.name == "triage.queue"
    )
    assert outcomes == ["None", "cancelled", "queue_full"]


async def _equals(value: Awaitable[int], want: int) -> bool:
    return await value == want


@pytest.fixture
def echo() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A tiny OpenAI-shaped server that records the headers of each inference request."""
    seen: list[dict[str, str]] = []

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "echo", "object": "model"}]})

    async def chat(request: Request) -> JSONResponse:
        seen.append(dict(request.headers))
        return JSONResponse({
            "id": "x", "object": "chat.completion", "model": "echo",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])])
    with running_app(app) as url:
        yield url, seen


@pytest.mark.parametrize("traced", [True, False], ids=["recording", "no-exporter"])
async def test_traceparent_reaches_the_backend(
    observed: Callable[..., str], spans: InMemorySpanExporter, echo: tuple[str, list[dict[str, str]]], traced: bool
) -> None:
    url, seen = echo
    base = observed(backends=[{"name": "echo", "url": url, "models": ["echo"]}], traced=traced)
    async with httpx.AsyncClient(headers={"traceparent": TRACEPARENT}) as client:
        body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
        assert (await client.post(f"{base}/v1/chat/completions", json=body)).status_code == 200
    version, trace_id, parent_id, flags = seen[-1]["traceparent"].split("-")
    assert trace_id == TRACE_ID and version == "00" and flags == "01"
    if traced:  # the backend's parent is the gateway's CLIENT span
        await eventually(lambda: "chat echo" in by_name(spans))
        assert parent_id == format(by_name(spans)["chat echo"].context.span_id, "016x")
    else:  # nothing recorded: the client's context passes through unchanged
        assert parent_id == PARENT_ID and not spans.get_finished_spans()
