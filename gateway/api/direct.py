"""The inference endpoints served past FastAPI's stack: ``TriageApp``.

A POST to ``/v1/chat/completions`` goes through about a dozen ASGI layers in FastAPI
before its handler runs: the app's telemetry check, Starlette's error, body-limit,
exception and exit-stack middlewares, the router's walk over every route, the route's
request wrapper — most wrapping ``send`` or ``receive`` again, for every chunk of a
stream. The inference handlers need none of it: they take the raw ``Request``, read
the body themselves under their own limit, and turn every failure into an OpenAI-style
answer. ``TriageApp`` hands those paths (``direct``) to their handlers through the
app's own middleware (``add_middleware``: the drain's ``InFlight``) and one error
guard; everything else (other paths and methods, lifespan) goes FastAPI's way, so the
surface is unchanged.

The guard answers what the handler did not catch as Starlette's would (500 before the
response started; the error raised on for the server to log), but with an OpenAI-style
body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import GatewayError

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Handler = Callable[[Request], Awaitable[Response]]

INTERNAL_MESSAGE = "The gateway failed to handle this request."


class TriageApp(FastAPI):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handlers: dict[str, Handler] = {}
        self._direct: ASGIApp | None = None  # built on the first request, after add_middleware

    def direct(self, path: str, handler: Handler) -> None:
        """Serve POSTs to ``path`` with ``handler``, past FastAPI's stack (the route stays
        in the router too: other methods get its 405)."""
        self._handlers[path] = handler
        self._direct = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        if scope["type"] == "http" and scope["method"] == "POST" and get_route_path(scope) in self._handlers:
            direct = self._direct
            if direct is None:
                direct = self._direct = self._build()
            scope["app"] = self
            await direct(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def _build(self) -> ASGIApp:
        app: ASGIApp = _endpoints(self._handlers)
        for cls, args, kwargs in reversed(self.user_middleware):
            app = cls(app, *args, **kwargs)
        return _guard(app)


def _endpoints(handlers: dict[str, Handler]) -> ASGIApp:
    async def endpoints(scope: Scope, receive: Receive, send: Send) -> None:
        response = await handlers[get_route_path(scope)](Request(scope, receive, send))
        await response(scope, receive, send)

    return endpoints


def _guard(app: ASGIApp) -> ASGIApp:
    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await app(scope, receive, watched)
        except Exception:
            if not started:
                await GatewayError(500, INTERNAL_MESSAGE, "server_error").response()(scope, receive, send)
            raise

    return guarded
