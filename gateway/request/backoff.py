"""A backend's overload answer (429/503 before the first byte) is backpressure.

The gateway exists to hold work in its own queue, so a backend that says it is full
is handled like a full slot, not passed on to the client: the job gives its slot back
with the backend's limit cut, the backend *cools down* for what its ``Retry-After``
asks (``upstream/refusal.py``'s ``Cooldown``: a default when absent, bounded) and gets
no grants meanwhile, and the request queues again at the front of its tier with its
arrival and what is left of its deadline (``Job.back_off``; when it gives up is
``scheduler/policy/backoff.py``'s). The client sees an error only then: our own 429
(backends rate limited) or 503 (backends overloaded), with ``Retry-After``.

What is here is the gateway's side: reading the refusal, and waiting — watching the
client, or with keep-alive comments on a stream whose 200 has gone out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from gateway.errors import GatewayError, from_scheduler
from gateway.request.context import queued_comments, until_disconnect
from gateway.request.disconnect import DisconnectWatch
from gateway.request.exchange import Exchange, refused, sse_event
from gateway.upstream.client import UpstreamResponse
from gateway.upstream.refusal import OVERLOADED, Cooldown
from scheduler.errors import BackendOverloaded, SchedulerError
from scheduler.job import Job
from scheduler.types import CallResult, Grant


class Backoff:
    def __init__(self, cooldown: Cooldown | None = None) -> None:
        self.cooldown = cooldown or Cooldown()

    def applies(self, response: UpstreamResponse) -> bool:
        """Is this answer (status and headers in, body unread) an overload refusal?"""
        return response.status_code in OVERLOADED

    async def requeue(self, job: Job, ex: Exchange, response: UpstreamResponse) -> asyncio.Future[Grant]:
        """Read the refusal and queue the request again: the future of its next grant.
        Raises our 429/503 (``GatewayError``) when it cannot wait any longer."""
        assert job.grant is not None
        status, backend = response.status_code, job.grant.backend
        cool_s = self.cooldown.seconds(response.headers.get("retry-after"))
        try:
            await ex.read_refusal(job, response)  # one that breaks off is a 502
        finally:
            await response.aclose()
        ex.ctx.trace.overloaded(backend, status, cool_s)
        try:
            return await job.back_off(status, cool_s)
        except BackendOverloaded as exc:
            raise from_scheduler(exc) from None
        finally:
            ex.end(CallResult(False, status))  # the span (back_off ended the part)

    async def again(self, watch: DisconnectWatch, job: Job, ex: Exchange, response: UpstreamResponse) -> None:
        """Queue the request again and wait, watching the client, for its next grant.
        Raises our 429/503 when it cannot wait any longer."""
        waiting = await self.requeue(job, ex, response)
        try:
            await until_disconnect(watch, waiting)
        except SchedulerError as exc:
            raise refused(ex.ctx, job.explain(exc)) from None
        ex.reset()

    async def again_in_stream(
        self, job: Job, ex: Exchange, response: UpstreamResponse, every_s: float
    ) -> AsyncGenerator[bytes, None]:
        """``again`` for a stream whose 200 has gone out: keep-alive comments while it
        waits; when it cannot wait, the SSE error event it ends with (``ex.response`` then
        stays the refusal's)."""
        try:
            waiting = await self.requeue(job, ex, response)
            try:
                async for comment in queued_comments(job, waiting, every_s):
                    yield comment
                waiting.result()
            finally:
                waiting.cancel()  # the client left while queued again: the ticket is withdrawn
        except (SchedulerError, GatewayError) as exc:
            yield sse_event(ex.failed(refused(ex.ctx, job.explain(exc)) if isinstance(exc, SchedulerError) else exc))
            return
        ex.reset()

