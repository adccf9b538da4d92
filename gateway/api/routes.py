"""The HTTP surface: OpenAI-compatible endpoints, health and readiness.

Handlers take the raw ``Request`` (no pydantic body models on the hot path; the
inference endpoints are plain Starlette routes, without FastAPI's per-request
dependency machinery), turn every failure into an OpenAI-style error, and hand the
work to ``Proxy``. A requested model name is resolved to a served one first
(aliases, Ollama's implicit ``:latest``: ``scheduler/backends/names.py``), and the
backend is sent the served name.

``/v1/models`` lists each served model once, with the fields its backend gave
(vLLM's ``max_model_len``, ``owned_by``, ...); ``/v1/models/{id}`` answers one, by the
same name resolution. ``/v1/embeddings`` is queued like generation, as short work
(it makes no output tokens), and its answer passed through.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.api.body import CLOSE, DRAIN_TIME_S, drain, read_body
from gateway.api.state import Gateway
from gateway.errors import GatewayError
from gateway.request.context import Principal, RequestContext, client_request_id, new_request_id
from gateway.request.disconnect import ClientGone
from gateway.request.relay import RelayResponse
from gateway.schemas import Endpoint, parse, parse_int_header
from scheduler.types import Outcome

router = APIRouter()


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json")


def _hint(principal: Principal, value: str | None) -> int | None:
    """x-triage-expected-tokens from a key allowed to send it (``trust_hints``); from any
    other key the header is checked, then ignored: a hint decides the queue order. The
    scheduler believes it only while the tenant's replies bear its hints out."""
    hint = parse_int_header(value, "x-triage-expected-tokens")
    return hint if principal.trust_hints else None


async def _inference(request: Request, endpoint: Endpoint) -> Response:
    arrived = time.monotonic()
    gw: Gateway = request.app.state.gateway
    request_id = new_request_id()
    headers = request.headers
    client_id = client_request_id(headers.get("x-request-id"))
    echo_id = client_id or request_id
    trace = gw.telemetry.begin(headers, endpoint.operation, endpoint.value)
    trace.client_request_id(client_id)
    raw: bytes | None = None
    try:
        principal = gw.auth.authenticate(headers.get("authorization"))
        trace.principal(request_id, principal.tenant, principal.key_id)
        raw = await read_body(request.receive, headers, gw.settings.max_body_bytes, gw.settings.body_timeout_s)
        req = parse(raw, endpoint, gw.settings.max_tokens_limit)
        served = gw.registry.resolve(req.model)
        if served is not None:
            req = req.with_model(served)
        timeout_ms = parse_int_header(headers.get("x-triage-timeout-ms"), "x-triage-timeout-ms")
        ctx = RequestContext(
            request_id=request_id,
            principal=principal,
            tier=gw.auth.tier(principal, headers.get("x-triage-priority")),
            hint=_hint(principal, headers.get("x-triage-expected-tokens")),
            oracle_tokens=parse_int_header(headers.get("x-triage-oracle-tokens"), "x-triage-oracle-tokens"),
            timeout_s=timeout_ms / 1000 if timeout_ms is not None else gw.settings.queue_timeout_s,
            trace=trace,
            arrived=arrived,
            client_request_id=client_id,
        )
        response = await gw.proxy.handle(request, req, ctx)
    except GatewayError as exc:
        trace.end(exc.status, exc.code or exc.type)
        answer = exc.response(echo_id)
        if raw is None:  # refused before the body was read (a bad key, a body too large or too slow)
            if exc.status not in (408, 413):
                await drain(request.receive, gw.settings.max_body_bytes, DRAIN_TIME_S)
            answer.headers.update(CLOSE)  # what is left of the body is not a next request
        return answer
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


async def embeddings(request: Request) -> Response:
    return await _inference(request, Endpoint.EMBEDDINGS)


# the inference endpoints: served past FastAPI's stack (``direct.py``), and plain Starlette
# routes too, so that another method gets the router's 405
INFERENCE = {"/v1/chat/completions": chat_completions, "/v1/completions": completions, "/v1/embeddings": embeddings}
for _path, _handler in INFERENCE.items():
    router.add_route(_path, _handler, methods=["POST"], include_in_schema=False)


def _card(card: dict[str, Any], now: int) -> dict[str, Any]:
    """A backend's model card as it gave it, with OpenAI's required fields where it left them out."""
    return {"object": "model", "created": now, "owned_by": "triage", **card}


@router.get("/v1/models")
async def models(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    try:
        gw.auth.authenticate(request.headers.get("authorization"))
    except GatewayError as exc:
        return exc.response()
    now = int(time.time())
    return _json({"object": "list", "data": [_card(c, now) for c in gw.registry.cards()]})


@router.get("/v1/models/{model_id:path}")
async def model(request: Request, model_id: str) -> Response:
    gw: Gateway = request.app.state.gateway
    try:
        gw.auth.authenticate(request.headers.get("authorization"))
        served = gw.registry.resolve(model_id)
        card = next((c for c in gw.registry.cards() if c["id"] == served), None)
        if card is None:
            raise GatewayError(
                404, f"The model '{model_id}' does not exist.", code="model_not_found", param="model"
            )
    except GatewayError as exc:
        return exc.response()
    return _json(_card(card, int(time.time())))


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
