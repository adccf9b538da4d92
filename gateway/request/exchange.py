"""One request's calls to its backends, as bytes: the open upstream response, the backend
call's span, and what the answer said. A paused, retried or re-queued request makes
several calls through one exchange, one at a time.

The exchange reads the job (its grant and route) but decides nothing for it: the proxy
tells the job that a call is over (the slot goes back), then ``end`` closes the call's
span; only an error answer that breaks off is told to both here (``read_refusal``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator

import orjson

from gateway import sse
from gateway.errors import GatewayError, from_scheduler, upstream_failed
from gateway.request.context import RequestContext
from gateway.request.relay import relay_events
from gateway.request.resume import Transcript, by_ids, resumable
from gateway.schemas import Carried, Endpoint, InferenceRequest
from gateway.telemetry.stream_stats import StreamStats
from gateway.telemetry.tracing import BackendCall, Reply
from gateway.upstream.client import (
    Upstream,
    UpstreamCall,
    UpstreamError,
    UpstreamResponse,
    headers_for,
    upstream_errors,
)
from scheduler.backends.backend import BackendConfig
from scheduler.errors import BackendOverloaded, SchedulerError
from scheduler.job import Job
from scheduler.types import CallResult


class Exchange:
    """One request's upstream side."""

    def __init__(self, upstream: Upstream, req: InferenceRequest, ctx: RequestContext) -> None:
        self.upstream, self.req, self.ctx = upstream, req, ctx
        self.response: UpstreamResponse | None = None  # the current call's answer
        self.sent_at = 0.0  # when the current call was sent
        self.call: BackendCall | None = None  # the current call's span, until it ends
        self.reply: Reply | None = None  # usage and timing of the answer, once known
        self.paused = False  # its slot went to more urgent work: the stream is being closed
        self.failure: GatewayError | None = None  # the error a stream ended with, after its 200
        self.refusal: tuple[int, bytes] | None = None  # a backend's refusal a stream ended with: status, body
        self.client_tpot_s: float | None = None  # a stream's time per token as its client saw it
        self._closing: asyncio.Task[None] | None = None
        self._rendered_prompt: str | None = None  # the chat prompt as the engine rendered it, once asked

    @property
    def streaming(self) -> bool:
        """The current call answered with a stream that is still open."""
        return self.response is not None and self.response.status_code == 200 and self.call is not None

    def asks_ids(self, job: Job) -> bool:
        """Does a stream that may be paused ask for token ids, to resume from them?"""
        assert job.route is not None
        return job.route.backend.token_resume and job.may_pause and resumable(self.req) and by_ids(self.req)

    def transcript(self, job: Job) -> Transcript:
        """The transcript of this request's stream on the job's backend (what was asked of it)."""
        assert job.route is not None
        backend = job.route.backend
        return Transcript.of(self.req, self.asks_ids(job), backend.counts_by_timings, backend.ids_in_logprobs)

    async def exact(self, backend: BackendConfig, first: BackendConfig, carried: Carried) -> Carried:
        """What a continuation on ``backend`` carries: its token ids where they can be sent
        there — the ids of ``first``'s engine, so only to the same engine — and, for an
        engine that takes the prompt as text before the ids (llama.cpp), that text: a
        completions prompt, or the chat prompt as the engine renders it
        (``/apply-template``). Else the text so far."""
        if carried.ids is None:
            return carried
        if backend.resume is not first.resume:
            return carried.as_text()
        if not backend.ids_in_logprobs:
            return carried
        head = self.req.body["prompt"] if self.req.endpoint is Endpoint.COMPLETIONS else await self._rendered(backend)
        return dataclasses.replace(carried, head=head) if isinstance(head, str) else carried.as_text()

    async def _rendered(self, backend: BackendConfig) -> str | None:
        """The chat request's prompt as ``backend`` renders it (llama.cpp's ``/apply-template``
        of the client's own body; asked once a request, however often it is paused); None if
        it cannot tell."""
        if self._rendered_prompt is not None:
            return self._rendered_prompt
        call = UpstreamCall(backend, "/apply-template", self.req.raw or orjson.dumps(self.req.body),
                            headers_for(backend, self.ctx.request_id))
        try:
            response = await self.upstream.open(call, stream=False)
            prompt = orjson.loads(response.content).get("prompt") if response.status_code == 200 else None
        except (UpstreamError, orjson.JSONDecodeError, AttributeError):
            return None
        if isinstance(prompt, str):
            self._rendered_prompt = prompt
        return self._rendered_prompt

    async def open(self, job: Job, body: bytes | None = None, endpoint: Endpoint | None = None) -> UpstreamResponse:
        """Send the request (``body``: the client's own, rewritten only where it must be)
        to the backend of the job's current grant (at ``endpoint``: the request's own if None)."""
        assert job.grant is not None and job.route is not None
        backend = job.route.backend
        if body is None:  # a stream that may be paused counts its tokens exactly
            body = self.req.upstream_body(
                job.route.priority, counted=job.may_pause and resumable(self.req),
                ids=backend.ids_ask if self.asks_ids(job) else None, timings=backend.counts_by_timings,
            )
        self.ctx.trace.dispatched(job.grant)
        self.call = self.ctx.trace.call(backend, self.req)
        self.reply, self.paused = None, False
        headers = headers_for(backend, self.ctx.request_id, self.call.headers)
        self.sent_at = time.monotonic()
        self.response = await self.upstream.open(
            UpstreamCall(backend, (endpoint or self.req.endpoint).value, body, headers), stream=self.req.stream
        )
        return self.response

    def failed(self, error: GatewayError) -> GatewayError:
        """The error this exchange's stream ends with (an answer assembled whole raises it)."""
        self.failure = error
        return error

    def reset(self) -> None:
        """A new grant: the last call's answer is no longer this request's."""
        self.response = None

    def end(self, result: CallResult) -> None:
        """The current call is over (the job has been told): its span ends. Once per call."""
        call, self.call = self.call, None
        tpot_s = self.client_tpot_s if self.client_tpot_s is not None else result.tpot_s
        self.ctx.trace.call_done(call, result.tokens, result.ok, result.status, tpot_s, self.reply)

    async def read_refusal(self, job: Job, response: UpstreamResponse) -> None:
        """The whole body of a non-200 answer to a stream; one that breaks off is a 502
        (the job and the span told it failed)."""
        try:
            with upstream_errors():
                await response.aread()
        except UpstreamError as exc:
            job.end_part(CallResult.failed())
            self.end(CallResult.failed())
            raise upstream_failed(f"its error answer broke off: {exc}") from None

    def whole(self, response: UpstreamResponse) -> CallResult:
        """How a whole answer (non-streamed, or refused) ended."""
        status = response.status_code
        self.reply = Reply.from_body(response.content) if status == 200 else None
        tokens = self.reply.tokens("completion_tokens") if self.reply else None
        tpot = (time.monotonic() - self.sent_at) / tokens if tokens else None
        return CallResult(status < 500, status, tokens, None, tpot)

    async def stream_over(self, stats: StreamStats) -> CallResult:
        """The end of a stream, however it ended: the upstream closed; how it ended."""
        if self.response is not None:
            await self.response.aclose()
        tokens = stats.usage.get("completion_tokens") if stats.usage else None
        stats.part_started = self.sent_at
        self.reply = Reply.from_stream(stats)
        self.client_tpot_s = stats.client_tpot_s(tokens)
        return CallResult(  # the backend's view of its last part: what the adaptive limit learns
            stats.error is None, 200, tokens if stats.completed else None, stats.ttft_s, stats.tpot_s(tokens)
        )

    def pause(self) -> None:
        """The dispatch script gave this request's slot away: close the upstream stream
        (the engine aborts it); the relay notices, and the request is resumed later."""
        self.paused = True
        if self.response is not None:
            self._closing = asyncio.get_running_loop().create_task(self.response.aclose())

    async def close_part(self) -> None:
        """A paused part's upstream, closed for certain."""
        if self._closing is not None:
            await self._closing
        if self.response is not None:
            await self.response.aclose()

    def relay(self, stats: StreamStats, trailer: bytes | None = None) -> AsyncGenerator[bytes, None]:
        assert self.response is not None
        return relay_events(self.response, self.req.include_usage, stats, trailer)


def sse_event(error: GatewayError) -> bytes:
    """``error`` as the SSE event a stream whose 200 has gone out ends with."""
    return sse.error(error.message, error.type, error.code)


def refused(ctx: RequestContext, exc: SchedulerError) -> GatewayError:
    """The answer to a request the scheduler refused or evicted, traced as such (one that
    backends refused as overloaded is the backends' answer, not the scheduler's)."""
    if not isinstance(exc, BackendOverloaded):
        ctx.trace.refused(exc.outcome)
    return from_scheduler(exc)
