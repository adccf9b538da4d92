"""One inference request's way: classify, queue, relay, release and learn (DESIGN.md §2).

Routes parse HTTP; this module decides nothing itself either: the classifier places
the request, the dispatcher grants a slot, the relay moves bytes. What is here is the
order of those steps and the promise that each request ends in a response or an
explicit error, with its slot given back whatever happens.
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from scheduler.backends import BackendRegistry
from scheduler.classify import Classifier, Placement
from scheduler.dispatcher import Dispatcher, Grant
from scheduler.errors import SchedulerError
from scheduler.scripts import TicketSpec
from scheduler.types import PredictInput

from .auth import Principal
from .errors import GatewayError, from_scheduler, upstream_failed
from .relay import RelayResponse, StreamStats
from .schemas import InferenceRequest
from .upstream import Upstream, UpstreamCall, UpstreamError, headers_for


class ClientGone(Exception):
    """The client closed its connection; nobody is left to answer."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    request_id: str
    principal: Principal
    tier: str
    hint: int | None  # x-triage-expected-tokens
    oracle_tokens: int | None  # x-triage-oracle-tokens (oracle policy only)
    timeout_s: float


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(request: Request, coro: Any) -> Any:
    """Run ``coro`` unless the client leaves first; then cancel it and raise ClientGone."""
    work = asyncio.ensure_future(coro)
    watch = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            return work.result()
        work.cancel()
        with suppress(asyncio.CancelledError):
            await work
        raise ClientGone()
    finally:
        watch.cancel()


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex}"


class Proxy:
    def __init__(
        self, dispatcher: Dispatcher, registry: BackendRegistry, classifier: Classifier, upstream: Upstream
    ) -> None:
        self._dispatcher = dispatcher
        self._registry = registry
        self._classifier = classifier
        self._upstream = upstream

    async def handle(self, request: Request, req: InferenceRequest, ctx: RequestContext) -> Response:
        pool = self._registry.pool_of(req.model)
        if pool is None:
            raise GatewayError(
                404, f"The model '{req.model}' does not exist or no backend serves it.",
                code="model_not_found", param="model",
            )
        inp = PredictInput(
            model=req.model, tenant=ctx.principal.tenant, prompt=req.prompt, system=req.system,
            prompt_chars=req.prompt_chars, n_messages=req.n_messages, max_tokens=req.max_tokens, hint=ctx.hint,
        )
        placement = self._classifier.place(inp, ctx.tier, ctx.oracle_tokens)
        spec = TicketSpec(
            id=ctx.request_id, model=req.model, tenant=ctx.principal.tenant, cls=placement.cls.value,
            predicted=int(placement.prediction.tokens), timeout_s=ctx.timeout_s, tier=ctx.tier,
            slack_s=placement.order.slack_s, tier_offset_s=placement.order.tier_offset_s,
            cost_s=placement.order.cost_s,
        )
        try:
            grant = await until_disconnect(request, self._dispatcher.acquire(spec, pool))
        except SchedulerError as exc:
            raise from_scheduler(exc) from None
        return await self._call(request, req, ctx, inp, placement, grant)

    async def _call(
        self, request: Request, req: InferenceRequest, ctx: RequestContext, inp: PredictInput,
        placement: Placement, grant: Grant,
    ) -> Response:
        backend = self._registry.backends[grant.backend].config
        call = UpstreamCall(backend, req.endpoint.value, req.upstream_body(), headers_for(backend, ctx.request_id))
        headers = {
            "x-request-id": ctx.request_id,
            "x-triage-queue-ms": f"{grant.queued_s * 1000:.1f}",
            "x-triage-class": placement.cls.value,
            "x-triage-backend": grant.backend,
        }
        released = False

        def done(tokens: int | None, ok: bool) -> None:
            nonlocal released
            if released:
                return
            released = True
            self._dispatcher.release_soon(grant)
            self._registry.report(grant.backend, ok)
            # a reply cut at max_tokens says only "at least": learning from it would bias low
            if tokens is not None and ok and (req.max_tokens is None or tokens < req.max_tokens):
                self._classifier.predictor.observe(inp, tokens)

        try:
            if req.stream:
                response = await until_disconnect(request, self._upstream.open(call, stream=True))
            else:
                response = await until_disconnect(request, self._upstream.open(call, stream=False))
        except UpstreamError as exc:
            done(None, False)
            raise upstream_failed(str(exc)) from None
        except BaseException:
            done(None, True)
            raise

        if not req.stream or response.status_code != 200:
            if req.stream:
                await response.aread()
                await response.aclose()
            done(_usage_tokens(response.content) if response.status_code == 200 else None,
                 response.status_code < 500)
            return Response(
                response.content, response.status_code, headers=headers,
                media_type=response.headers.get("content-type", "application/json"),
            )

        async def on_done(stats: StreamStats) -> None:
            tokens = stats.usage.get("completion_tokens") if stats.usage else None
            done(tokens if stats.completed else None, stats.error is None)

        return RelayResponse(response, req.include_usage, headers, on_done)


def _usage_tokens(content: bytes) -> int | None:
    try:
        usage = orjson.loads(content).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    return None

