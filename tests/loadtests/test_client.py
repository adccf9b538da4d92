"""The load generator's client reads a gateway's queue wait wherever the gateway tells it.

A stream granted within a second tells its wait in the ``x-triage-queue-ms`` header; one
still queued then gets its 200 first and tells its wait in a comment before ``[DONE]``.
Reading only the header left every wait over a second out of the queue statistics, so a
benchmark's queue p99 could never pass one second. The double is a real HTTP server on
loopback writing the gateway's own bytes (``gateway.sse``).
"""

from __future__ import annotations

import time

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from gateway import sse
from loadtests.client import Sender, Target
from loadtests.requests import PlannedRequest
from simulator.testing import running_app

CHUNK = sse.data(b'{"choices":[{"index":0,"delta":{"content":"hi"}}]}')
USAGE = sse.data(b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}')


async def chat(request: Request) -> StreamingResponse:
    queued_at_start = request.headers.get("x-case") == "queued"

    async def body():  # noqa: ANN202
        if queued_at_start:
            yield sse.comment("queued position=1 eta_ms=900")
        yield CHUNK
        yield USAGE
        if queued_at_start:
            yield sse.comment("x-triage-queue-ms=2345.6")
        yield sse.data(b"[DONE]")

    headers = {} if queued_at_start else {"x-triage-queue-ms": "12.5"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


APP = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


async def send(url: str, case: str) -> float | None:
    req = PlannedRequest(index=0, cls="short", prompt="hello", prompt_tokens=1, max_tokens=1)
    async with httpx.AsyncClient(headers={"x-case": case}, trust_env=False) as client:
        record = await Sender(client, Target((url,), "m"), time.perf_counter()).send(req)
    assert record.ok and record.output_tokens == 1
    return record.queue_ms


async def test_the_queue_wait_comes_from_the_header_or_from_the_comment_before_done() -> None:
    with running_app(APP) as url:
        assert await send(url, "granted") == 12.5
        assert await send(url, "queued") == 2345.6  # over a second: only the comment tells it
