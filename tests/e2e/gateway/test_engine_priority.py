"""``engine_priority`` in each engine's direction, checked on what the backend receives."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support import running_app


@pytest.fixture(scope="module")
def echo() -> Iterator[tuple[Callable[[str], str], list[dict[str, Any]]]]:
    """OpenAI-shaped servers that record each request body; ``url(owner)`` is one whose
    ``/v1/models`` says it is owned by ``owner`` (how SGLang and vLLM name themselves)."""
    seen: list[dict[str, Any]] = []

    def app(owner: str) -> Starlette:
        async def models(request: Request) -> JSONResponse:
            return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": owner}]})

        async def metrics(request: Request) -> Response:
            return Response(status_code=404)

        async def chat(request: Request) -> JSONResponse:
            seen.append(orjson.loads(await request.body()))
            return JSONResponse({
                "id": "x", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })

        return Starlette(routes=[
            Route("/v1/models", models), Route("/metrics", metrics), Route("/v1/chat/completions", chat, methods=["POST"]),
        ])

    with running_app(app("vllm")) as vllm, running_app(app("sglang")) as sglang, running_app(app("x")) as other:
        urls = {"vllm": vllm, "sglang": sglang, "other": other}
        yield urls.__getitem__, seen


@pytest.mark.parametrize(("owner", "backend", "sign"), [
    ("vllm", {}, 1),  # lower first
    ("sglang", {}, -1),  # higher first by default
    ("sglang", {"engine_priority_order": "lower_first"}, 1),  # --schedule-low-priority-values-first
    ("other", {"engine": "tgi"}, None),  # TGI reads no priority: none is sent
    ("other", {}, 1),  # unknown engine: as configured, lower first
])
async def test_priority_runs_the_engines_way(
    gateway_factory: Callable[..., str], echo: tuple[Callable[[str], str], list[dict[str, Any]]],
    owner: str, backend: dict[str, Any], sign: int | None,
) -> None:
    url, seen = echo
    base = gateway_factory([{"name": "e", "url": url(owner), "engine_priority": True, **backend}])
    sent = []
    async with httpx.AsyncClient() as client:
        for tier in ("interactive", "batch"):
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            resp = await client.post(f"{base}/v1/chat/completions", json=body, headers={"x-triage-priority": tier})
            assert resp.status_code == 200
            sent.append(seen[-1].get("priority"))
    if sign is None:
        assert sent == [None, None]
        return
    urgent, later = sent
    assert isinstance(urgent, int) and isinstance(later, int)
    assert sign * later > sign * urgent  # batch work is the later one, in the engine's own terms
