"""``Exchange``: one request's calls to its backends, against the real backend double.
``open`` sends what the backend must get; ``whole`` and ``stream_over`` say how a call
ended; ``end`` ends the call's span, once (the proxy tells the job first)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import orjson
import pytest

from gateway.errors import GatewayError
from gateway.request.exchange import Exchange, refused, sse_event
from gateway.telemetry import semconv as sc
from gateway.telemetry.stream_stats import StreamStats
from gateway.upstream.client import Upstream
from scheduler.backends.backend import BackendConfig
from scheduler.errors import BackendOverloaded, QueueFull
from scheduler.job import Route
from scheduler.types import CallResult, Outcome
from tests.gateway.request.doubles import (
    DONE,
    FINISH,
    HELLO,
    ROLE,
    USAGE,
    FakeJob,
    Seen,
    Traced,
    backend,
    chat,
)

At = Callable[[str], BackendConfig]


async def granted(job: FakeJob) -> FakeJob:
    (await job.start()).result()
    return job


async def test_open_sends_the_clients_body_with_the_backends_key_our_id_and_the_trace(
    upstream: Upstream, base: str, traced: Traced, seen: list[Seen]
) -> None:
    job = await granted(FakeJob([backend("ok", f"{base}/ok", api_key="sk-backend")]))
    ctx = traced.context()
    req = chat(user="u")
    ex = Exchange(upstream, req, ctx)

    response = await ex.open(job)

    assert response.status_code == 200 and ex.response is response
    (got,) = seen
    assert got.body == req.raw
    assert got.headers["authorization"] == "Bearer sk-backend"  # the backend's key, never the client's
    assert got.headers["x-request-id"] == "req-1"
    trace_id = format(ctx.trace.span.get_span_context().trace_id, "032x")
    assert got.headers["traceparent"].split("-")[1] == trace_id  # the call's span, in the request's trace
    assert ex.call is not None  # the call's span is open until the call ends


async def test_open_tells_an_engine_with_its_own_queue_the_priority(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    job = await granted(FakeJob([at("ok")]))
    assert job.route is not None
    job.route = Route(job.route.backend, 7)
    await Exchange(upstream, chat(), traced.context()).open(job)
    assert orjson.loads(seen[0].body)["priority"] == 7


@pytest.mark.parametrize(
    ("mode", "ok", "status", "tokens"),
    [("ok", True, 200, 7), ("busy503", False, 503, None), ("bad400", True, 400, None)],
)
async def test_whole_says_how_an_answer_ended(
    upstream: Upstream, at: At, traced: Traced, mode: str, ok: bool, status: int, tokens: int | None
) -> None:
    job = await granted(FakeJob([at(mode)]))
    ex = Exchange(upstream, chat(), traced.context())
    result = ex.whole(await ex.open(job))
    assert (result.ok, result.status, result.tokens) == (ok, status, tokens)
    assert (result.tpot_s is not None) is (tokens is not None)
    assert (ex.reply.usage if ex.reply else None) == (USAGE if status == 200 else None)


async def test_end_ends_the_calls_span_once_and_leaves_the_job_to_the_proxy(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = await granted(FakeJob([at("ok")]))
    ex = Exchange(upstream, chat(), traced.context())
    result = ex.whole(await ex.open(job))

    ex.end(result)
    ex.end(CallResult.failed())  # a second end: no second span, no change to the first

    assert job.told("end_part") == []  # the exchange knows nothing of the scheduler
    (call,) = traced.finished("CLIENT")
    assert call.attributes[sc.HTTP_STATUS] == 200 and call.attributes[sc.INPUT_TOKENS] == 5
    assert call.attributes[sc.OUTPUT_TOKENS] == 7 and call.status.is_ok
    assert ex.call is None


async def test_stream_over_closes_the_upstream_and_counts_a_complete_stream(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = await granted(FakeJob([at("ok")]))
    ex = Exchange(upstream, chat(stream=True), traced.context())
    await ex.open(job)
    assert ex.streaming
    stats = StreamStats()
    blocks = [block async for block in ex.relay(stats)]
    assert b"".join(blocks) == ROLE + HELLO + FINISH + DONE

    result = await ex.stream_over(stats)

    assert result.ok and result.status == 200 and result.tokens == 7
    assert result.ttft_s is not None and result.ttft_s >= 0
    assert stats.part_started == ex.sent_at  # time to first token counts from the send
    assert ex.response is not None and ex.response.is_closed
    assert ex.reply is not None and ex.reply.first_token_at == stats.first_chunk_at


async def test_a_stream_that_ended_early_is_not_learned_from(upstream: Upstream, at: At, traced: Traced) -> None:
    job = await granted(FakeJob([at("hang")]))
    ex = Exchange(upstream, chat(stream=True), traced.context())
    await ex.open(job)
    stats = StreamStats()
    async for _ in ex.relay(stats):
        break  # the client left after the first event

    result = await ex.stream_over(stats)

    assert result.ok and result.tokens is None  # not complete: no length to learn
    assert ex.response is not None and ex.response.is_closed


async def test_pause_closes_the_running_stream_and_close_part_waits_for_it(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = await granted(FakeJob([at("hang")]))
    ex = Exchange(upstream, chat(stream=True), traced.context())
    await ex.open(job)

    ex.pause()
    assert ex.paused
    await ex.close_part()
    assert ex.response is not None and ex.response.is_closed
    ex.reset()
    assert ex.response is None and not ex.streaming


@pytest.fixture
async def cut_refusal() -> AsyncIterator[str]:
    """A backend whose 503 answer breaks off mid-body."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 100\r\n\r\n{\"error\"")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()


async def test_a_refusal_that_breaks_off_is_a_502_and_fails_the_call(
    upstream: Upstream, cut_refusal: str, traced: Traced
) -> None:
    job = await granted(FakeJob([backend("cut", cut_refusal)]))
    ex = Exchange(upstream, chat(stream=True), traced.context())
    response = await ex.open(job)
    assert response.status_code == 503

    with pytest.raises(GatewayError) as caught:
        await ex.read_refusal(job, response)

    assert caught.value.status == 502 and "broke off" in caught.value.message
    ((_, backend_name, result),) = job.told("end_part")
    assert backend_name == "cut" and result == CallResult.failed()
    (call,) = traced.finished("CLIENT")
    assert not call.status.is_ok


def test_refused_traces_the_schedulers_refusals_but_not_the_backends(traced: Traced) -> None:
    ctx = traced.context()
    error = refused(ctx, QueueFull("the queue is full", 3.0))
    assert error.status == 429 and error.code == "queue_full" and error.retry_after_s == 3.0
    admission = traced.telemetry.instruments.admission.series
    assert admission == {(Outcome.QUEUE_FULL, ""): 1}

    other = traced.context()
    error = refused(other, BackendOverloaded(503, 2.0))
    assert error.status == 503 and error.code == "backend_overloaded"
    assert admission == {(Outcome.QUEUE_FULL, ""): 1}  # the backends' answer is not a refusal


def test_an_error_after_the_200_is_one_sse_event() -> None:
    block = sse_event(GatewayError(504, "waited too long", "timeout_error", "queue_timeout"))
    assert block.startswith(b"data: ") and block.endswith(b"\n\n")
    assert orjson.loads(block[6:])["error"] == {
        "message": "waited too long", "type": "timeout_error", "param": None, "code": "queue_timeout",
    }
