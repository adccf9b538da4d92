"""The OpenAI-compatible surface of a served gateway: inference through the simulator,
the model list, health and readiness."""

from __future__ import annotations

import httpx
import pytest
from fastapi.routing import APIRoute
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.routing import Route

from gateway.api.routes import router
from gateway.api.state import Gateway
from tests.gateway.api.conftest import USER, Served
from tests.support import MODEL

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_the_inference_endpoints_are_plain_starlette_routes() -> None:
    inference = {r.path: r for r in router.routes if isinstance(r, Route) and r.path.startswith("/v1/") and "POST" in (r.methods or ())}
    assert set(inference) == {"/v1/chat/completions", "/v1/completions", "/v1/embeddings"}
    assert not any(isinstance(r, APIRoute) for r in inference.values())  # no per-request dependency solving


async def test_a_chat_request_is_answered_through_the_simulator(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        resp = await http.post("/v1/chat/completions", json=CHAT, headers={**USER, "x-request-id": "mine-1"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["usage"]["completion_tokens"] <= 4 and body["choices"][0]["message"]["role"] == "assistant"
    assert resp.headers["x-request-id"] == "mine-1"
    assert resp.headers["x-triage-request-id"].startswith("req-")
    assert resp.headers["x-triage-backend"] == "sim" and resp.headers["x-triage-class"] in ("short", "medium", "long")


@pytest.mark.parametrize(
    ("headers", "body", "status", "code"),
    [
        ({}, CHAT, 401, "invalid_api_key"),
        (USER, {**CHAT, "model": "nope"}, 404, "model_not_found"),
        (USER, b"{not json", 400, "invalid_json"),
        ({**USER, "x-triage-timeout-ms": "-1"}, CHAT, 400, None),
    ],
)
async def test_refusals_are_openai_errors_with_our_request_id(
    served: Served, headers: dict[str, str], body: object, status: int, code: str | None
) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
        resp = await http.post("/v1/chat/completions", headers=headers, **kwargs)
    assert resp.status_code == status
    error = resp.json()["error"]
    assert error["code"] == code and error["message"]
    assert resp.headers["x-request-id"].startswith("req-")


async def test_models_lists_what_the_backends_serve_and_answers_one_by_name(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        listed = await http.get("/v1/models", headers=USER)
        one = await http.get(f"/v1/models/{MODEL}", headers=USER)
        missing = await http.get("/v1/models/nope", headers=USER)
        anonymous = await http.get("/v1/models")
    assert listed.status_code == 200 and listed.json()["object"] == "list"
    assert [c["id"] for c in listed.json()["data"]] == [MODEL]
    assert one.json()["id"] == MODEL and one.json()["object"] == "model"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert anonymous.status_code == 401


async def test_health_and_readiness(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        health = await http.get("/health")
        ready = await http.get("/ready")
    assert health.json() == {"status": "ok"}
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "redis": True, "backends": True, "draining": False, "backends_down": []}
    assert isinstance(served.app.state.gateway, Gateway)


async def test_redis_ok_is_false_when_redis_cannot_be_reached(unused_port: int) -> None:
    redis = Redis(host="127.0.0.1", port=unused_port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    gateway = Gateway(
        settings=None, redis=redis, dispatcher=None, registry=None, auth=None, proxy=None,  # type: ignore[arg-type]
        telemetry=None, drain=None, keys=None, quotas=None,  # type: ignore[arg-type]
    )
    assert await gateway.redis_ok() is False
    await redis.aclose()


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
