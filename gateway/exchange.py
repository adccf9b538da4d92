"""One request's state between the scheduler and the backend: its grant, the open
upstream response, the backend call's span, and how the call ended (``finish``, once
per grant). ``proxy.py`` holds the order of the steps; this, what each step changes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import httpx

from gateway.context import RequestContext
from gateway.errors import upstream_failed
from gateway.relay import StreamStats, relay_events
from gateway.schemas import InferenceRequest
from gateway.telemetry.tracing import BackendCall, Reply
from gateway.upstream.client import UpstreamCall, UpstreamError, headers_for, upstream_errors
from scheduler.quota import Hold
from scheduler.service import Admission
from scheduler.types import CallResult, Grant, Outcome

if TYPE_CHECKING:
    from gateway.proxy import Proxy


class Exchange:
    """One request's state between the scheduler and the backend."""

    def __init__(self, proxy: Proxy, req: InferenceRequest, ctx: RequestContext, adm: Admission) -> None:
        self.proxy, self.req, self.ctx, self.adm = proxy, req, ctx, adm
        self.grant: Grant | None = None
        self.response: httpx.Response | None = None  # an open upstream stream
        self.sent_at = 0.0  # when the upstream call was sent
        self.call: BackendCall | None = None  # the backend call's span
        self.reply: Reply | None = None  # usage and timing of the answer, once known
        self.paused = False  # its slot went to more urgent work: the stream is being closed
        self.overloads = 0  # times a backend refused it as overloaded (429/503)
        self.overload_status = 0  # the last such status
        self.hold: Hold | None = None  # its share of its quotas, settled when it ends
        self._closing: asyncio.Task[None] | None = None
        self._finished = False

    def again(self, adm: Admission) -> Exchange:
        """A fresh exchange for a retry of the same request."""
        fresh = Exchange(self.proxy, self.req, self.ctx, adm)
        fresh.hold = self.hold
        fresh.overloads, fresh.overload_status = self.overloads, self.overload_status
        return fresh

    @property
    def streaming(self) -> bool:
        """The backend answers with an open stream."""
        return self.response is not None and self.response.status_code == 200 and not self._finished

    def settle(self, usage: dict[str, int] | None) -> None:
        """The request is over: its quotas learn what it really used. Once (``Hold``).
        Usage unknown: nothing if it never reached a backend, else the reservation stands."""
        if self.hold is None:
            return
        if usage and isinstance(usage.get("prompt_tokens"), int):
            real: int | None = usage["prompt_tokens"] + int(usage.get("completion_tokens") or 0)
        else:
            real = 0 if self.grant is None else None
        self.hold.settle(real)

    def headers(self) -> dict[str, str]:
        headers = {"x-request-id": self.ctx.echo_id, "x-triage-class": self.adm.placement.cls.value}
        if self.ctx.client_request_id is not None:
            headers["x-triage-request-id"] = self.ctx.request_id  # ours, as the backend got it
        if self.hold is not None:
            headers.update(self.hold.headers.headers())
        if self.grant is not None:
            headers["x-triage-queue-ms"] = f"{self.grant.queued_s * 1000:.1f}"
            headers["x-triage-backend"] = self.grant.backend
        return headers

    def restart(self, adm: Admission, grant: Grant) -> None:
        """The next part of a paused request, on a new grant."""
        self.adm, self.grant, self.response, self.call, self.reply = adm, grant, None, None, None
        self.paused, self._finished = False, False

    def pause(self) -> None:
        """The dispatch script gave this request's slot away: close the upstream stream
        (the engine aborts it); the relay notices, and the request is resumed later."""
        self.paused = True
        if self.response is not None:
            self._closing = asyncio.get_running_loop().create_task(self.response.aclose())

    async def open(self, body: bytes | None = None) -> httpx.Response:
        assert self.grant is not None
        route = self.proxy.scheduler.route(self.adm, self.grant)
        body = body if body is not None else self.req.upstream_body(route.priority)
        self.ctx.trace.dispatched(self.grant)
        self.call = self.ctx.trace.call(route.backend, self.req)
        headers = headers_for(route.backend, self.ctx.request_id, self.call.headers)
        call = UpstreamCall(route.backend, self.req.endpoint.value, body, headers)
        self.sent_at = time.monotonic()
        self.response = await self.proxy.upstream.open(call, stream=self.req.stream)
        return self.response

    def finish(self, result: CallResult) -> None:
        """Give the slot back and tell the scheduler how the call went. Once."""
        if self._finished or self.grant is None:
            return
        self._finished = True
        self.proxy.scheduler.complete(self.adm, self.grant, result, time.monotonic() - self.sent_at)
        if result.tokens is not None and self.ctx.on_length is not None:
            self.ctx.on_length(result.tokens)
        self.ctx.trace.call_done(  # after the slot is back
            self.call, result.tokens, result.ok, result.status, result.tpot_s, self.reply
        )

    async def read_refusal(self, response: httpx.Response) -> None:
        """The whole body of a non-200 answer to a stream; one that breaks off is a 502."""
        try:
            with upstream_errors():
                await response.aread()
        except UpstreamError as exc:
            self.finish(CallResult.failed())
            raise upstream_failed(f"its error answer broke off: {exc}") from None

    def finish_response(self, response: httpx.Response) -> None:
        """A whole (non-streamed, or refused) answer."""
        status = response.status_code
        self.reply = Reply.from_body(response.content) if status == 200 else None
        tokens = self.reply.tokens("completion_tokens") if self.reply else None
        tpot = (time.monotonic() - self.sent_at) / tokens if tokens else None
        self.finish(CallResult(status < 500, status, tokens, None, tpot))

    async def close_stream(self, stats: StreamStats) -> None:
        """The end of a stream, however it ended: close the upstream, then finish."""
        if self.response is not None:
            await self.response.aclose()
        tokens = stats.usage.get("completion_tokens") if stats.usage else None
        stats.started = self.sent_at
        self.reply = Reply.from_stream(stats)
        self.finish(CallResult(
            stats.error is None, 200, tokens if stats.completed else None, stats.ttft_s, stats.tpot_s(tokens)
        ))
        self.settle(stats.usage)
        gone = Outcome.CLIENT_GONE if stats.client_gone else None
        self.ctx.trace.end(200, Outcome.STREAM_BROKEN if stats.error else gone)

    async def close_part(self) -> None:
        """A paused part ends: its upstream closed, its slot already given away (nothing
        learned, the backend not blamed)."""
        if self._closing is not None:
            await self._closing
        if self.response is not None:
            await self.response.aclose()
        self.finish(CallResult.client_gone())

    def relay(self, stats: StreamStats, trailer: bytes | None = None) -> AsyncGenerator[bytes, None]:
        assert self.response is not None
        return relay_events(self.response, self.req.include_usage, stats, trailer)
