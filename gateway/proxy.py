"""One inference request's way: admit, queue, call, relay, complete (DESIGN.md §2).

Routes parse HTTP; this module decides nothing itself either: the scheduler
(``scheduler.service``) places the request, grants a slot and learns from the
outcome, the upstream client calls the backend, the relay moves bytes. What is here
is the order of those steps and the promise that each request ends in a response or
an explicit error, with its slot given back whatever happens.

A streaming request still queued after ``comment_after_s`` gets its 200 and SSE
comment lines (``: queued position=N eta_ms=M``) every second while it waits; an
error after that point travels as an SSE error event, and its queue time, which no
header could carry, comes as a comment (``: x-triage-queue-ms=N``) before ``[DONE]``.
A backend's 429/503 before the first byte queues the request again (``backoff.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing

import httpx
from starlette.requests import Request
from starlette.responses import Response

from gateway.backoff import Backoff
from gateway.context import RequestContext, StillQueued, queued_comments, until_disconnect
from gateway.disconnect import DisconnectWatch
from gateway.errors import GatewayError, from_scheduler, upstream_failed
from gateway.exchange import Exchange
from gateway.relay import RelayResponse, StreamStats, sse_error
from gateway.resume import PAUSED, Transcript, continuation_body, resumable
from gateway.schemas import Endpoint, InferenceRequest
from gateway.upstream.client import Upstream, UpstreamError
from gateway.upstream.refusal import client_error
from scheduler.errors import NoBackend, SchedulerError
from scheduler.policy.quota import reserve_tokens
from scheduler.quota import Hold, Quotas
from scheduler.service import Admission, Scheduler
from scheduler.types import CallResult, Grant, PredictInput


def _sse(error: GatewayError) -> bytes:
    return sse_error(error.message, error.type, error.code)


def _refused(ctx: RequestContext, exc: SchedulerError) -> GatewayError:
    ctx.trace.refused(exc.outcome)
    return from_scheduler(exc)


class Proxy:
    comment_after_s = 1.0  # a queued stream starts and shows its place after this long
    comment_every_s = 1.0

    def __init__(
        self, scheduler: Scheduler, upstream: Upstream, quotas: Quotas | None = None, backoff: Backoff | None = None
    ) -> None:
        self.scheduler = scheduler
        self.upstream = upstream
        self.quotas = quotas  # None: no quota is configured anywhere
        self.backoff = backoff or Backoff(scheduler)  # what a backend's 429/503 does

    async def _charge(self, req: InferenceRequest, ctx: RequestContext, adm: Admission) -> Hold | None:
        """Admission against the tenant's and the key's quotas, before the request is queued."""
        if self.quotas is None:
            return None
        p = ctx.principal
        reserve = reserve_tokens(req.prompt_chars, adm.placement.prediction.tokens, req.max_tokens)
        plan = self.quotas.plan(p.tenant, p.key_id, p.quotas, reserve)
        if plan is None:
            return None
        try:
            return await self.quotas.admit(plan, ctx.request_id)
        except SchedulerError as exc:
            raise _refused(ctx, exc) from None

    async def handle(self, request: Request, req: InferenceRequest, ctx: RequestContext) -> Response:
        inp = PredictInput(
            model=req.model, tenant=ctx.principal.tenant, prompt=req.prompt, system=req.system,
            prompt_chars=req.prompt_chars, n_messages=req.n_messages, max_tokens=req.cap, hint=ctx.hint,
            n=req.n,
        )
        try:
            adm = await self.scheduler.admit(inp, ctx.tier, ctx.timeout_s, ctx.request_id, ctx.oracle_tokens)
        except NoBackend as exc:  # BackendsDown included
            raise from_scheduler(exc) from None
        ctx.trace.enqueued(req, adm.placement, adm.ticket, adm.pool)
        exchange = Exchange(self, req, ctx, adm)
        exchange.hold = await self._charge(req, ctx, adm)
        watch = DisconnectWatch(request.receive)  # one watcher for the whole request
        response: Response | None = None
        try:
            try:
                future = await self.scheduler.submit(adm)
                if future.done():  # decided in the enqueue's own reply: nothing to wait for
                    exchange.grant = await self.scheduler.wait(adm, future)
                else:
                    work = asyncio.ensure_future(self.scheduler.wait(adm, future))
                    exchange.grant = await until_disconnect(
                        watch, work, self.comment_after_s if req.stream else None
                    )
            except SchedulerError as exc:
                raise _refused(ctx, self.scheduler.explain(adm, exc)) from None
            except StillQueued:
                stats = StreamStats()
                body = self._queued_stream(exchange, work, stats)
                response = RelayResponse(body, stats, exchange.headers(), exchange.close_stream, watch)
                return response
            response = await self._call(watch, exchange)
            return response
        finally:
            if not isinstance(response, RelayResponse):  # a stream takes the watch over
                watch.stop()
                exchange.settle(None)  # a no-op when the answer settled it already

    async def _open_with_retry(
        self, watch: DisconnectWatch, exchange: Exchange
    ) -> tuple[Exchange, httpx.Response]:
        """Call the backend; if it fails before the first byte, once more on another."""
        try:
            with watch.guard():
                return exchange, await exchange.open()
        except UpstreamError as exc:
            assert exchange.grant is not None
            exchange.finish(CallResult.failed())
            retry = self.scheduler.retry(exchange.adm, exchange.grant.backend)
            if retry is None:
                raise upstream_failed(str(exc)) from None
        exchange = exchange.again(retry)
        try:
            exchange.grant = await until_disconnect(watch, asyncio.ensure_future(self.scheduler.acquire(retry)))
        except SchedulerError as exc:
            raise _refused(exchange.ctx, exc) from None
        try:
            with watch.guard():
                return exchange, await exchange.open()
        except UpstreamError as exc:
            exchange.finish(CallResult.failed())
            raise upstream_failed(str(exc)) from None
        except BaseException:
            exchange.finish(CallResult.client_gone())
            raise

    async def _call(self, watch: DisconnectWatch, exchange: Exchange) -> Response:
        try:
            exchange, response = await self._open_with_retry(watch, exchange)
            while self.backoff.applies(response):
                await self.backoff.again(watch, exchange, response)
                exchange, response = await self._open_with_retry(watch, exchange)
        except BaseException:
            exchange.finish(CallResult.client_gone())
            raise
        headers = exchange.headers()
        if exchange.req.stream and response.status_code == 200:
            stats = StreamStats()
            return RelayResponse(self._relay(exchange, stats), stats, headers, exchange.close_stream, watch)
        if exchange.req.stream:  # a refusal to a stream: its whole body, then pass it on
            try:
                await exchange.read_refusal(response)
            except BaseException:
                exchange.finish(CallResult.client_gone())  # the client left (a 502 has already finished)
                raise
            finally:
                await response.aclose()
        exchange.finish_response(response)
        exchange.settle(exchange.reply.usage if exchange.reply else None)
        if response.status_code != 200:
            body = client_error(response.status_code, response.content)
            return Response(body, response.status_code, headers=headers, media_type="application/json")
        media_type = response.headers.get("content-type", "application/json")
        return Response(response.content, response.status_code, headers=headers, media_type=media_type)

    async def _queued_stream(
        self, exchange: Exchange, work: asyncio.Future[Grant], stats: StreamStats
    ) -> AsyncGenerator[bytes, None]:
        """The body of a stream that started while queued: comments, then the relay."""
        try:
            async for comment in queued_comments(self.scheduler, exchange.adm, work, self.comment_every_s):
                yield comment
            exchange.grant = work.result()
        except SchedulerError as exc:
            yield _sse(_refused(exchange.ctx, self.scheduler.explain(exchange.adm, exc)))
            return
        finally:
            work.cancel()  # the client left while queued: the dispatcher withdraws the ticket
        queued_ms = exchange.grant.queued_s * 1000
        async for block in self._open_in_stream(exchange):
            yield block
        if not exchange.streaming:
            return
        async for block in self._relay(exchange, stats, f": x-triage-queue-ms={queued_ms:.1f}\n\n".encode()):
            yield block

    async def _open_in_stream(self, exchange: Exchange, body: bytes | None = None) -> AsyncGenerator[bytes, None]:
        """Call the backend for a stream whose 200 has gone out. When it answers with a
        stream (``exchange.streaming``) this yields at most keep-alive comments (while a
        request refused as overloaded waits again); else it ends with the event the client
        gets instead (the failure as an SSE error)."""
        while True:
            try:
                response = await exchange.open(body)
            except UpstreamError as exc:
                exchange.finish(CallResult.failed())
                yield _sse(upstream_failed(str(exc)))
                return
            if response.status_code == 200:
                return
            if not self.backoff.applies(response):
                try:
                    await exchange.read_refusal(response)
                except GatewayError as error:
                    yield _sse(error)
                    return
                exchange.finish_response(response)
                yield b"data: " + client_error(response.status_code, response.content) + b"\n\n"  # OpenAI-shaped
                return
            async for block in self.backoff.again_in_stream(exchange, response, self.comment_every_s):
                yield block
            if exchange.response is not None:  # not restarted on a new grant: it ended in an error
                return

    async def _relay(
        self, exchange: Exchange, stats: StreamStats, trailer: bytes | None = None
    ) -> AsyncGenerator[bytes, None]:
        """Relay the stream; one that may be paused, every part of it as one response.
        ``trailer`` (a comment) goes out just before the stream's ``[DONE]``."""
        assert exchange.grant is not None
        route = self.scheduler.route(exchange.adm, exchange.grant)
        if not (resumable(exchange.req) and self.scheduler.may_pause(route)):
            async for block in exchange.relay(stats, trailer):
                yield block
            return
        transcript = Transcript(exchange.req.endpoint is Endpoint.CHAT)
        carried: list[int] = []  # tokens each continuation carried

        def on_pause() -> None:
            if transcript.resumable:  # else a tool call began since its last heartbeat: it runs on
                exchange.pause()

        while True:
            assert exchange.grant is not None
            self.scheduler.watch(exchange.grant, transcript.progress, on_pause)
            quantum = transcript.tokens + self.scheduler.quantum_tokens  # a candidate past this
            async with aclosing(exchange.relay(stats, trailer)) as blocks:
                async for block in blocks:
                    if exchange.paused:
                        break  # what follows the pause (the close breaking the read) is not sent
                    if block := transcript.read(block):
                        yield block
                    if quantum is not None and transcript.tokens > quantum and transcript.resumable:
                        self.scheduler.passed_quantum(exchange.grant, transcript.tokens)
                        quantum = None
            if not exchange.paused or stats.completed:
                if transcript.part and stats.usage:
                    raw_prompt = stats.usage.get("prompt_tokens")
                    stats.usage = transcript.summed(stats.usage)
                    if isinstance(raw_prompt, int):
                        prompt = raw_prompt - transcript.carried
                        exchange.ctx.trace.resumed(route.backend.name, sum(prompt + c for c in carried))
                return
            exchange.ctx.trace.paused(exchange.grant.backend, transcript.tokens)
            await exchange.close_part()
            stats.error, stats.completed = None, False
            transcript.next_part()
            carried.append(transcript.carried)
            yield PAUSED
            adm = self.scheduler.continuation(
                exchange.adm, exchange.ctx.request_id, time.monotonic() - exchange.ctx.trace.started
            )
            try:
                future = await self.scheduler.submit(adm)
                work = asyncio.ensure_future(self.scheduler.wait(adm, future))
                try:
                    while not work.done():
                        yield PAUSED
                        await asyncio.wait({work}, timeout=self.comment_every_s)
                    grant = work.result()
                finally:
                    work.cancel()  # the client left while paused: the ticket is withdrawn
            except SchedulerError as exc:
                yield _sse(from_scheduler(exc))
                return
            exchange.restart(adm, grant)
            route = self.scheduler.route(adm, grant)
            exchange.ctx.trace.resumed(grant.backend, None)
            body = continuation_body(exchange.req, transcript, route.priority)
            async for block in self._open_in_stream(exchange, body):
                yield block
            if not exchange.streaming:
                return
