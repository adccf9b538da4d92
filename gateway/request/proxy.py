"""One inference request's way through the gateway: admit, queue, call, relay, end.

The scheduler decides (``Scheduler.admit`` gives the request a ``Job``, which is told
each thing that happens to it); the exchange moves bytes to and from the backend; the
relay forwards the stream. What is here is the order of those steps, the pause loop of
a stream that may be paused, and the promise that each request ends in a response or
an explicit error, with its slot given back whatever happens.

A streaming request still queued after ``comment_after_s`` gets its 200 and SSE
comment lines (``: queued position=N eta_ms=M``) every second while it waits; an
error after that point travels as an SSE error event, and its queue time, which no
header could carry, comes as a comment (``: x-triage-queue-ms=N``) before ``[DONE]``.
A backend's 429/503 before the first byte queues the request again (``backoff.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from functools import partial

from starlette.requests import Request
from starlette.responses import Response

from gateway import sse
from gateway.errors import GatewayError, from_scheduler, ratelimit_headers, upstream_failed
from gateway.request.backoff import Backoff
from gateway.request.context import RequestContext, StillQueued, queued_comments, until_disconnect
from gateway.request.disconnect import DisconnectWatch
from gateway.request.exchange import Exchange, refused, sse_event
from gateway.request.relay import RelayResponse
from gateway.request.resume import PAUSED, Transcript, resumable
from gateway.request.whole import Shapes, as_stream, collectable
from gateway.schemas import Endpoint, InferenceRequest
from gateway.telemetry.stream_stats import StreamStats
from gateway.upstream.client import Upstream, UpstreamError, UpstreamResponse
from gateway.upstream.refusal import client_error
from scheduler.errors import SchedulerError
from scheduler.job import Job, JobRequest
from scheduler.service import Scheduler
from scheduler.types import CallResult, Grant, Outcome, PredictInput


def headers(job: Job, ctx: RequestContext) -> dict[str, str]:
    out = {"x-request-id": ctx.echo_id, "x-triage-class": job.cls}
    if ctx.client_request_id is not None:
        out["x-triage-request-id"] = ctx.request_id  # ours, as the backend got it
    if job.rate_limits is not None:
        out.update(ratelimit_headers(job.rate_limits))
    if job.grant is not None:
        out["x-triage-queue-ms"] = f"{job.grant.queued_s * 1000:.1f}"
        out["x-triage-backend"] = job.grant.backend
    return out


class Proxy:
    comment_after_s = 1.0  # a queued stream starts and shows its place after this long
    comment_every_s = 1.0

    def __init__(self, scheduler: Scheduler, upstream: Upstream, backoff: Backoff | None = None) -> None:
        self.scheduler = scheduler
        self.upstream = upstream
        self.backoff = backoff or Backoff()  # what a backend's 429/503 does
        self.shapes = Shapes()  # each backend's non-streamed answer: how to rebuild one (whole.py)

    async def handle(self, request: Request, req: InferenceRequest, ctx: RequestContext) -> Response:
        inp = PredictInput(
            model=req.model, tenant=ctx.principal.tenant, prompt=req.prompt, system=req.system,
            prompt_chars=req.prompt_chars, n_messages=req.n_messages, max_tokens=req.cap, hint=ctx.hint,
            n=req.n,
        )
        p = ctx.principal
        spec = JobRequest(ctx.request_id, ctx.tier, ctx.arrived, ctx.timeout_s, p.key_id, p.quotas, ctx.oracle_tokens)
        try:
            job = await self.scheduler.admit(inp, spec)
        except SchedulerError as exc:  # NoBackend, BackendsDown
            raise from_scheduler(exc) from None
        ctx.trace.enqueued(req, job.placement, job.ticket, job.pool)
        ex = Exchange(self.upstream, req, ctx)
        watch = DisconnectWatch(request.receive)  # one watcher for the whole request
        response: Response | None = None
        try:
            try:
                waiting = await job.start()
                await until_disconnect(watch, waiting, self.comment_after_s if req.stream else None)
            except SchedulerError as exc:
                raise refused(ctx, job.explain(exc)) from None
            except StillQueued:
                stats = StreamStats()
                body = self._queued_stream(job, ex, waiting, stats)
                response = RelayResponse(body, stats, headers(job, ctx), partial(self._stream_over, job, ex), watch)
                return response
            response = await self._call(watch, job, ex)
            return response
        finally:
            if not isinstance(response, RelayResponse):  # a stream takes the watch over
                watch.stop()
                job.finish(CallResult.client_gone(), None)  # a no-op when the answer finished it

    async def _open_with_retry(self, watch: DisconnectWatch, job: Job, ex: Exchange) -> UpstreamResponse:
        """Call the backend; if it fails before the first byte, once more on another."""
        try:
            with watch.guard():
                return await ex.open(job)
        except UpstreamError as exc:
            retry = job.failed()
            ex.end(CallResult.failed())  # the span, after the slot is back
            if retry is None:
                raise upstream_failed(str(exc)) from None
        try:
            await until_disconnect(watch, retry)
        except SchedulerError as exc:
            raise refused(ex.ctx, job.explain(exc)) from None
        try:
            with watch.guard():
                return await ex.open(job)
        except UpstreamError as exc:
            self._ended(job, ex, CallResult.failed())
            raise upstream_failed(str(exc)) from None

    def _ended(self, job: Job, ex: Exchange, result: CallResult) -> None:
        """The current call is over: the job first (the slot goes back), then the span."""
        job.end_part(result)
        ex.end(result)

    async def _call(self, watch: DisconnectWatch, job: Job, ex: Exchange) -> Response:
        assert job.route is not None
        whole = job.may_pause and collectable(ex.req, self.shapes, job.route.backend.name)
        if whole:  # streamed upstream so that it may be paused; answered whole
            ex = Exchange(self.upstream, as_stream(ex.req), ex.ctx)
        try:
            response = await self._open_with_retry(watch, job, ex)
            while self.backoff.applies(response):
                await self.backoff.again(watch, job, ex, response)
                response = await self._open_with_retry(watch, job, ex)
        except BaseException:
            self._ended(job, ex, CallResult.client_gone())  # a no-op where a failure has ended the call
            raise
        out = headers(job, ex.ctx)
        if whole and response.status_code == 200:
            return await self._whole(watch, job, ex, out)
        if ex.req.stream and response.status_code == 200:
            stats = StreamStats()
            return RelayResponse(self._relay(job, ex, stats), stats, out, partial(self._stream_over, job, ex), watch)
        if ex.req.stream:  # a refusal to a stream: its whole body, then pass it on
            try:
                await ex.read_refusal(job, response)
            except BaseException:
                self._ended(job, ex, CallResult.client_gone())  # the client left (a 502 has ended it)
                raise
            finally:
                await response.aclose()
        result = ex.whole(response)
        job.finish(result, ex.reply.usage if ex.reply else None)
        ex.end(result)
        if response.status_code != 200:
            body = client_error(response.status_code, response.content)
            return Response(body, response.status_code, headers=out, media_type="application/json")
        self.shapes.learn(job.route.backend.name, ex.req.endpoint, response.content)
        media_type = response.headers.get("content-type", "application/json")
        return Response(response.content, response.status_code, headers=out, media_type=media_type)

    async def _whole(self, watch: DisconnectWatch, job: Job, ex: Exchange, out: dict[str, str]) -> Response:
        """Relay a stream the client did not ask for into a transcript, pausing it as a
        stream would be; then the answer the backend would have written."""
        stats, transcript = StreamStats(), ex.transcript(job)
        try:
            with watch.guard():
                async for _ in self._relay(job, ex, stats, transcript=transcript):
                    pass
        finally:
            result = await ex.stream_over(stats)
            job.finish(result, stats.usage)
            ex.end(result)
        if ex.failure is not None:
            raise ex.failure
        if ex.refusal is not None:
            status, body = ex.refusal
            return Response(body, status, headers=out, media_type="application/json")
        if stats.error is not None or not stats.completed or transcript.finish_reason is None:
            raise upstream_failed(stats.error or "the stream ended before its answer was complete")
        assert job.grant is not None
        body = self.shapes.answer(job.grant.backend, ex.req.endpoint, transcript, stats.usage)
        return Response(body, 200, headers=headers(job, ex.ctx), media_type="application/json")

    async def _stream_over(self, job: Job, ex: Exchange, stats: StreamStats) -> None:
        """A stream's end, however it ended: the upstream closed, the slot back, quotas settled."""
        result = await ex.stream_over(stats)
        job.finish(result, stats.usage)
        ex.end(result)
        gone = Outcome.CLIENT_GONE if stats.client_gone else None
        ex.ctx.trace.end(200, Outcome.STREAM_BROKEN if stats.error else gone)

    async def _queued_stream(
        self, job: Job, ex: Exchange, waiting: asyncio.Future[Grant], stats: StreamStats
    ) -> AsyncGenerator[bytes, None]:
        """The body of a stream that started while queued: comments, then the relay."""
        try:
            async for comment in queued_comments(job, waiting, self.comment_every_s):
                yield comment
            waiting.result()
        except SchedulerError as exc:
            yield sse_event(refused(ex.ctx, job.explain(exc)))
            return
        finally:
            waiting.cancel()  # the client left while queued: the ticket is withdrawn
        assert job.grant is not None
        trailer = sse.comment(f"x-triage-queue-ms={job.grant.queued_s * 1000:.1f}")
        async for block in self._open_in_stream(job, ex):
            yield block
        if not ex.streaming:
            return
        async for block in self._relay(job, ex, stats, trailer):
            yield block

    async def _open_in_stream(
        self, job: Job, ex: Exchange, body: bytes | None = None, endpoint: Endpoint | None = None
    ) -> AsyncGenerator[bytes, None]:
        """Call the backend for a stream whose 200 has gone out. When it answers with a
        stream (``ex.streaming``) this yields at most keep-alive comments (while a request
        refused as overloaded waits again); else it ends with the event the client gets
        instead (the failure as an SSE error)."""
        while True:
            try:
                response = await ex.open(job, body, endpoint)
            except UpstreamError as exc:
                self._ended(job, ex, CallResult.failed())
                yield sse_event(ex.failed(upstream_failed(str(exc))))
                return
            if response.status_code == 200:
                return
            if not self.backoff.applies(response):
                try:
                    await ex.read_refusal(job, response)
                except GatewayError as error:
                    yield sse_event(ex.failed(error))
                    return
                self._ended(job, ex, ex.whole(response))
                ex.refusal = (response.status_code, client_error(response.status_code, response.content))
                yield sse.data(ex.refusal[1])  # OpenAI-shaped
                return
            async for block in self.backoff.again_in_stream(job, ex, response, self.comment_every_s):
                yield block
            if ex.response is not None:  # not granted again: it ended in an error
                return

    async def _relay(
        self, job: Job, ex: Exchange, stats: StreamStats, trailer: bytes | None = None,
        transcript: Transcript | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """Relay the stream; one that may be paused, every part of it as one response.
        ``trailer`` (a comment) goes out just before the stream's ``[DONE]``; ``transcript``:
        where to read it into (one of its own if None)."""
        if not (resumable(ex.req) and job.may_pause):
            async for block in ex.relay(stats, trailer):
                yield block
            return
        ctx = ex.ctx
        if transcript is None:
            transcript = ex.transcript(job)
        assert job.route is not None
        first = job.route.backend  # whose token ids the stream carries
        resumes: list[tuple[str, int]] = []  # each continuation: its backend, the tokens it carried

        def on_pause() -> None:
            if transcript.resumable:  # else a tool call began since its last heartbeat: it runs on
                ex.pause()

        while True:
            assert job.grant is not None and job.route is not None
            quantum: int | None = job.watch(transcript.progress, on_pause, transcript.tokens)
            async with aclosing(ex.relay(stats, trailer)) as blocks:
                async for block in blocks:
                    if ex.paused:
                        break  # what follows the pause (the close breaking the read) is not sent
                    if block := transcript.read(block):
                        yield block
                    if quantum is not None and transcript.tokens > quantum and transcript.resumable:
                        job.passed_quantum(transcript.tokens)
                        quantum = None
            if not ex.paused or stats.completed:
                if transcript.part and stats.usage:
                    raw_prompt = stats.usage.get("prompt_tokens")
                    stats.usage = transcript.summed(stats.usage)
                    if isinstance(raw_prompt, int):  # now the prompt's own tokens are known
                        prompt = raw_prompt - transcript.carried
                        for backend, c in resumes:
                            ctx.trace.reread(backend, prompt + c)
                return
            ctx.trace.paused(job.grant.backend, transcript.tokens, job.pause_reason)
            await ex.close_part()
            carried = transcript.next_part()
            stats.new_part(transcript.carried)
            try:
                try:
                    waiting = await job.pause()  # the continuation queues with the original arrival
                finally:
                    ex.end(CallResult.client_gone())  # the span (pause() ended the part)
                try:
                    yield PAUSED
                    while not waiting.done():
                        yield PAUSED
                        await asyncio.wait({waiting}, timeout=self.comment_every_s)
                    waiting.result()
                finally:
                    waiting.cancel()  # the client left while paused: the ticket is withdrawn
            except SchedulerError as exc:
                yield sse_event(ex.failed(refused(ctx, job.explain(exc))))
                return
            assert job.grant is not None and job.route is not None
            carried = await ex.exact(job.route.backend, first, carried)
            transcript.goes_on(carried)
            ctx.trace.resumed(job.grant.backend, carried.ids is not None)
            resumes.append((job.grant.backend, transcript.carried))
            ex.reset()
            ids = job.route.backend.ids_ask if carried.ids is not None else None
            body = ex.req.upstream_body(job.route.priority, carried, ids=ids, timings=transcript.timings)
            async for block in self._open_in_stream(job, ex, body, ex.req.part_endpoint(carried)):
                yield block
            if not ex.streaming:
                return
