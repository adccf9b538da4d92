"""Slow, idle and too many clients: what the HTTP server itself enforces per connection.

uvicorn has a keep-alive idle timeout but no deadline for a request's head and no
bound on its size, and its ``limit_concurrency`` answers every path (``/health``
too) with a plain-text 503. So the gateway serves with its own protocol, a thin
subclass of uvicorn's httptools protocol:

- **head deadline** (``header_timeout_s``): from the connection's first byte (or the
  first byte of the next request on a kept-alive connection) to the end of the head;
  past it the client gets a 408 and the connection is closed. A request trickling its
  request line or headers a byte a second holds its socket that long, no longer.
- **head size** (``max_header_bytes``): a larger head gets a 431 and the connection closed.
- **connection cap** (``max_connections``): a connection beyond it is answered at once
  with a 503 (``Retry-After``, ``Connection: close``) unless it asks for ``/health`` or
  ``/ready``, which are still served, so a probe sees the replica alive and full; its
  head deadline is short (``OVER_CAP_HEADER_TIMEOUT_S``), so an over-cap flood of half
  heads is dropped quickly.
- **keep-alive** (``keep_alive_timeout_s``): uvicorn's own idle timeout between requests.

The body's deadline is the application's (``api/body.py``'s ``read_body``, ``body_timeout_s``):
there the client gets an OpenAI-style 408 and the unread rest is never waited for.
Errors written here are OpenAI-shaped too: the protocol's own 400 for a request that is
not HTTP included.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import error_body
from gateway.settings import Settings

OVER_CAP_HEADER_TIMEOUT_S = 1.0
EXEMPT_PATHS = frozenset({"/health", "/ready"})  # answered past the connection cap

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large",
            503: b"Service Unavailable"}


class _HeadTooLarge(Exception):
    """Raised in a parser callback: the parser stops and reports an error."""


def _raw_error(status: int, message: str, type_: str, code: str, extra: bytes = b"") -> bytes:
    body = error_body(message, type_, code)
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n%s\r\n" % (status, _REASONS[status], len(body), extra)
    ) + body


def protocol_class(settings: Settings) -> type[HttpToolsProtocol]:
    """The uvicorn ``http`` protocol class that enforces ``settings``' connection limits."""
    header_timeout_s = settings.header_timeout_s
    max_header_bytes = settings.max_header_bytes
    cap = settings.max_connections or None
    busy_body = error_body(
        "This gateway replica has too many open connections; retry shortly.", "service_unavailable",
        "too_many_connections",
    )

    async def over_cap(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"1"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": busy_body})

    class GuardedProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_timer: asyncio.TimerHandle | None = None
            self._head_bytes = 0
            self._in_head = False
            inner = self.app

            async def app(scope: Any, receive: Any, send: Any) -> None:
                if cap is not None and len(self.connections) > cap and scope.get("path") not in EXEMPT_PATHS:
                    self.logger.warning("over the connection cap (%d): answered 503", cap)
                    await over_cap(scope, receive, send)
                    return
                await inner(scope, receive, send)

            self.app = app

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._start_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head()
            super().connection_lost(exc)

        def _start_head(self) -> None:
            self._stop_head()
            self._in_head, self._head_bytes = True, 0
            over = cap is not None and len(self.connections) > cap
            timeout = min(header_timeout_s, OVER_CAP_HEADER_TIMEOUT_S) if over else header_timeout_s
            self._head_timer = self.loop.call_later(timeout, self._head_expired)

        def _stop_head(self) -> None:
            self._in_head = False
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_expired(self) -> None:
            self._head_timer = None
            if self._in_head and not self.transport.is_closing():
                message = f"The request head did not arrive within {header_timeout_s:g} s."
                self._refuse(_raw_error(408, message, "invalid_request_error", "request_timeout"))

        def _refuse(self, raw: bytes) -> None:
            self._stop_head()
            self.transport.write(raw)
            self.transport.close()

        # the head's bytes are counted as the parser reads them (not the socket's bytes: the
        # unread rest of a refused body is not a head), its deadline starts with its first byte
        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._head_timer is None:
                self._start_head()

        def on_url(self, url: bytes) -> None:
            self._count_head(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count_head(len(name) + len(value) + 4)
            super().on_header(name, value)

        def _count_head(self, size: int) -> None:
            self._head_bytes += size
            if self._head_bytes > max_header_bytes:
                raise _HeadTooLarge()  # stops the parser; data_received answers (send_400_response)

        def on_headers_complete(self) -> None:
            self._stop_head()
            super().on_headers_complete()

        def send_400_response(self, msg: str) -> None:
            if self._head_bytes > max_header_bytes:
                message = f"The request head is larger than {max_header_bytes} bytes."
                self._refuse(_raw_error(431, message, "invalid_request_error", "header_too_large"))
            else:
                self._refuse(_raw_error(400, "The request is not valid HTTP/1.1.", "invalid_request_error",
                                        "invalid_http"))

    return GuardedProtocol


def server_options(settings: Settings) -> dict[str, Any]:
    """The uvicorn.Config keyword arguments for a gateway served under ``settings``."""
    return {
        "host": settings.host,
        "port": settings.port,
        "http": protocol_class(settings),
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "access_log": settings.access_log,
    }



WORKER_SETTINGS_ENV = "TRIAGE_WORKER_SETTINGS"  # the settings (JSON) of `triage serve --workers N`


def __getattr__(name: str) -> Any:
    """``gateway.server.connections:WorkerProtocol``: the protocol of a worker process, built from
    the settings its parent left in the environment (uvicorn pickles its config to start
    workers, and a class built at run time cannot be pickled; an import path can)."""
    if name == "WorkerProtocol":
        import os

        return protocol_class(Settings.model_validate_json(os.environ[WORKER_SETTINGS_ENV]))
    raise AttributeError(name)
