"""A backend's overload answer (429/503 before the first byte) is backpressure.

The gateway exists to hold work in its own queue, so a backend that says it is full
is handled like a full slot, not passed on to the client: its slot goes back with its
limit cut (the adaptive limit's overload signal), it *cools down* for what its
``Retry-After`` asks (``upstream/refusal.py``'s ``Cooldown``: a default when absent,
bounded) and gets no grants meanwhile, and the request is queued again at the front
of its tier with its arrival and what is left of its deadline
(``Scheduler.back_off``). The client sees an error only when that deadline passes, or
no backend of the model can take the request before it: then our own 429 (backends
rate limited) or 503 (backends overloaded), with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import httpx

from gateway.context import queued_comments, until_disconnect
from gateway.disconnect import DisconnectWatch
from gateway.errors import GatewayError, backend_overloaded, from_scheduler
from gateway.relay import sse_error
from gateway.upstream.refusal import OVERLOADED, Cooldown
from scheduler.errors import DeadlineExceeded, SchedulerError
from scheduler.service import Admission, Scheduler
from scheduler.types import CallResult

if TYPE_CHECKING:
    from gateway.exchange import Exchange


class Backoff:
    def __init__(self, scheduler: Scheduler, cooldown: Cooldown | None = None, max_attempts: int = 20) -> None:
        self.scheduler = scheduler
        self.cooldown = cooldown or Cooldown()
        self.max_attempts = max_attempts  # a bound for a request without a deadline

    def applies(self, response: httpx.Response) -> bool:
        """Is this answer (status and headers in, body unread) an overload refusal?"""
        return response.status_code in OVERLOADED

    async def requeue(self, exchange: Exchange, response: httpx.Response) -> Admission:
        """Free the refusing backend's slot, cool it down, and queue the request again;
        the admission to wait on. Raises our 429/503 when it cannot wait any longer."""
        assert exchange.grant is not None
        status, backend = response.status_code, exchange.grant.backend
        cool_s = self.cooldown.seconds(response.headers.get("retry-after"))
        try:
            await exchange.read_refusal(response)  # one that breaks off is a 502
        finally:
            await response.aclose()
        exchange.finish(CallResult(False, status))  # status 429/503: the limit is cut, no breaker failure
        exchange.overloads += 1
        exchange.overload_status = status
        ctx = exchange.ctx
        age_s = time.monotonic() - ctx.trace.started
        left_s = ctx.timeout_s - age_s if ctx.timeout_s > 0 else None
        ctx.trace.overloaded(backend, status, cool_s)
        if (left_s is not None and left_s <= 0) or exchange.overloads > self.max_attempts:
            await self.scheduler.registry.cool_down(backend, cool_s)
            raise backend_overloaded(status, self.scheduler.ready_in(exchange.adm.inp.model))
        model = exchange.adm.inp.model
        retry = await self.scheduler.back_off(exchange.adm, backend, cool_s, age_s, left_s, exchange.overloads)
        if retry is None:  # no backend of the model can take it before its deadline
            ready_in = self.scheduler.ready_in(model)
            raise backend_overloaded(status, ready_in if ready_in is not None else cool_s)
        return retry

    async def again(self, watch: DisconnectWatch, exchange: Exchange, response: httpx.Response) -> None:
        """Queue the request again and wait (watching the client) for its next grant; the
        exchange restarts on it. Raises our 429/503 when it cannot wait any longer."""
        adm = await self.requeue(exchange, response)
        try:
            grant = await until_disconnect(watch, asyncio.ensure_future(self.scheduler.acquire(adm)))
        except SchedulerError as exc:
            raise self.gave_up(exchange, exc) from None
        exchange.restart(adm, grant)

    async def again_in_stream(
        self, exchange: Exchange, response: httpx.Response, every_s: float
    ) -> AsyncGenerator[bytes, None]:
        """``again`` for a stream whose 200 has gone out: keep-alive comments while it
        waits; when it cannot wait, the SSE error event it ends with (the exchange is then
        not restarted)."""
        try:
            adm = await self.requeue(exchange, response)
            work = asyncio.ensure_future(self.scheduler.acquire(adm))
            try:
                async for comment in queued_comments(self.scheduler, adm, work, every_s):
                    yield comment
                grant = work.result()
            finally:
                work.cancel()  # the client left while queued again: the ticket is withdrawn
        except (SchedulerError, GatewayError) as exc:
            error = self.gave_up(exchange, exc) if isinstance(exc, SchedulerError) else exc
            yield sse_error(error.message, error.type, error.code)
            return
        exchange.restart(adm, grant)

    def gave_up(self, exchange: Exchange, exc: SchedulerError) -> GatewayError:
        """A re-queued request's wait ended in ``exc``: past its deadline, our 429/503."""
        if isinstance(exc, DeadlineExceeded) and exchange.overloads:
            return backend_overloaded(exchange.overload_status, self.scheduler.ready_in(exchange.adm.inp.model))
        exchange.ctx.trace.refused(exc.outcome)
        return from_scheduler(exc)
