"""``TriageApp``: the inference paths served past FastAPI's stack, over a real server on
loopback — through the app's own middleware, with an OpenAI-style 500 for what a handler
did not catch, and every other path, method and root path as FastAPI serves them."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import uvicorn
from starlette.requests import Request
from starlette.responses import Response

from gateway.api.direct import INTERNAL_MESSAGE, TriageApp
from simulator.testing import serving
from tests.support import running_app


class Counting:
    """A user middleware: counts what passes through it, and marks the scope."""

    def __init__(self, app: Any, seen: list[str]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append(f"{scope['method']} {scope['path']}")
            scope["counted"] = True
        await self.app(scope, receive, send)


def make_app(seen: list[str]) -> TriageApp:
    app = TriageApp()

    async def echo(request: Request) -> Response:
        body = await request.body()
        through = {"body": body.decode(), "counted": request.scope.get("counted", False),
                   "app": request.app is app, "direct": "router" not in request.scope}
        return Response(orjson.dumps(through), media_type="application/json")

    async def broken(request: Request) -> Response:
        raise RuntimeError("a bug")

    app.add_api_route("/v1/echo", echo, methods=["POST"])
    app.add_api_route("/v1/other", echo, methods=["POST"])  # a route served FastAPI's way
    app.direct("/v1/echo", echo)
    app.direct("/v1/broken", broken)
    app.add_middleware(Counting, seen=seen)
    return app


def test_a_direct_path_runs_its_handler_through_the_apps_middleware_but_not_the_router() -> None:
    seen: list[str] = []
    with running_app(make_app(seen)) as url, httpx.Client(base_url=url) as client:
        answer = client.post("/v1/echo", content=b"hello")
        assert answer.status_code == 200
        assert answer.json() == {"body": "hello", "counted": True, "app": True, "direct": True}

        routed = client.post("/v1/other", content=b"hi")  # not direct: FastAPI's way, the same middleware
        assert routed.json() == {"body": "hi", "counted": True, "app": True, "direct": False}
        assert client.get("/v1/echo").status_code == 405  # another method: the router's answer
        assert client.post("/v1/nothing").status_code == 404
    assert seen == ["POST /v1/echo", "POST /v1/other", "GET /v1/echo", "POST /v1/nothing"]


def test_what_a_direct_handler_did_not_catch_is_an_openai_style_500() -> None:
    with running_app(make_app([])) as url:
        with httpx.Client(base_url=url) as client:
            answer = client.post("/v1/broken", content=b"{}")
        assert answer.status_code == 500
        assert answer.json()["error"] == {
            "message": INTERNAL_MESSAGE, "type": "server_error", "param": None, "code": None,
        }
        with httpx.Client(base_url=url) as client:  # that connection was closed (the error raised on); the server goes on
            assert client.post("/v1/echo", content=b"after").json()["body"] == "after"


def test_a_root_path_is_stripped_as_the_router_would() -> None:
    """Behind a proxy that strips a prefix (uvicorn's ``--root-path``), the scope's path carries
    the prefix again; it is taken off before the path is matched."""

    def config(port: int) -> uvicorn.Config:
        return uvicorn.Config(make_app([]), host="127.0.0.1", port=port, log_level="warning", root_path="/gw")

    with serving(config) as url, httpx.Client(base_url=url) as client:
        answer = client.post("/v1/echo", content=b"x")  # the scope's path: /gw/v1/echo
        assert answer.status_code == 200 and answer.json()["direct"] is True
