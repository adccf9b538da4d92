"""The HTTP surface: OpenAI-compatible endpoints, health and readiness.

Handlers take the raw ``Request`` (no pydantic body models on the hot path; the two
inference endpoints are plain Starlette routes, without FastAPI's per-request
dependency machinery), turn every failure into an OpenAI-style error, and hand the
work to ``Proxy``.
"""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.context import RequestContext, client_request_id, new_request_id
from gateway.disconnect import ClientGone
from gateway.errors import GatewayError
from gateway.relay import RelayResponse
from gateway.schemas import Endpoint, parse, parse_int_header
from gateway.state import Gateway
from scheduler.types import Outcome

router = APIRouter()


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json")


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise GatewayError(413, f"The request body is larger than {limit} bytes.", code="payload_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise GatewayError(413, f"The request body is larger than {limit} bytes.", code="payload_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def _inference(request: Request, endpoint: Endpoint) -> Response:
    gw: Gateway = request.app.state.gateway
    request_id = new_request_id()
    headers = request.headers
    client_id = client_request_id(headers.get("x-request-id"))
    echo_id = client_id or request_id
    trace = gw.telemetry.begin(headers, endpoint.operation, endpoint.value)
    trace.client_request_id(client_id)
    try:
        principal = gw.auth.authenticate(headers.get("authorization"))
        trace.principal(request_id, principal.tenant, principal.key_id)
        raw = await _read_body(request, gw.settings.max_body_bytes)
        req = parse(raw, endpoint, gw.settings.max_tokens_limit)
        timeout_ms = parse_int_header(headers.get("x-triage-timeout-ms"), "x-triage-timeout-ms")
        ctx = RequestContext(
            request_id=request_id,
            principal=principal,
            tier=gw.auth.tier(principal, headers.get("x-triage-priority")),
            hint=parse_int_header(headers.get("x-triage-expected-tokens"), "x-triage-expected-tokens"),
            oracle_tokens=parse_int_header(headers.get("x-triage-oracle-tokens"), "x-triage-oracle-tokens"),
            timeout_s=timeout_ms / 1000 if timeout_ms is not None else gw.settings.queue_timeout_s,
            trace=trace,
            client_request_id=client_id,
        )
        response = await gw.proxy.handle(request, req, ctx)
    except GatewayError as exc:
        trace.end(exc.status, exc.code or exc.type)
        return exc.response(echo_id)
    except ClientGone:
        trace.end(499, Outcome.CLIENT_GONE)
        return Response(status_code=499, headers={"x-request-id": echo_id})
    except BaseException:
        trace.end(500, Outcome.INTERNAL)
        raise
    if not isinstance(response, RelayResponse):  # a stream's trace ends with its last byte
        trace.end(response.status_code)
    return response


async def chat_completions(request: Request) -> Response:
    return await _inference(request, Endpoint.CHAT)


async def completions(request: Request) -> Response:
    return await _inference(request, Endpoint.COMPLETIONS)


# plain Starlette routes: FastAPI's per-request dependency solving buys nothing here
router.add_route("/v1/chat/completions", chat_completions, methods=["POST"], include_in_schema=False)
router.add_route("/v1/completions", completions, methods=["POST"], include_in_schema=False)


@router.get("/v1/models")
async def models(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    try:
        gw.auth.authenticate(request.headers.get("authorization"))
    except GatewayError as exc:
        return exc.response()
    now = int(time.time())
    data = [{"id": m, "object": "model", "created": now, "owned_by": "triage"} for m in gw.registry.models()]
    return _json({"object": "list", "data": data})


@router.get("/health")
async def health() -> Response:
    return _json({"status": "ok"})


@router.get("/ready")
async def ready(request: Request) -> Response:
    """Ready to take work: Redis answers and the replica is not draining. Backends that
    are down are reported, and make it unready only with ``ready_requires_backend``
    (requests are answered 503 meanwhile, by every replica alike)."""
    gw: Gateway = request.app.state.gateway
    redis_ok = await gw.redis_ok()
    backends_ok = gw.registry.any_healthy()
    ready = redis_ok and not gw.drain.draining and (backends_ok or not gw.settings.ready_requires_backend)
    body = {
        "ready": ready, "redis": redis_ok, "backends": backends_ok, "draining": gw.drain.draining,
        "backends_down": gw.registry.down(),
    }
    return _json(body, 200 if ready else 503)
