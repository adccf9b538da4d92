"""Calls to backends over httpx. ``upstream_errors`` is the one place httpx errors
become ``UpstreamError``: every call to a backend (requests, streams, probes) runs in it.

One ``AsyncClient`` serves every backend, over ``FastTransport`` (``transport.py``:
keep-alive connections per host, O(1) per request). ``Upstream.open`` sends a request
to a plain-HTTP backend past the client (the direct path: the head written from the
call's parts, the answer an ``Answer``, no ``httpx.Request`` or ``Response`` built — about
as much work as the rest of the upstream call); an ``https://`` backend goes through the
client. Either way the status is known before the client's response starts, and a
stream must be closed by the caller (``RelayResponse`` does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.upstream.connection import encode_post
from gateway.upstream.transport import FastTransport
from scheduler.backends.backend import BackendConfig


class UpstreamError(Exception):
    """The backend could not be reached, broke, or went silent; ``str()`` says which."""


@contextmanager
def upstream_errors() -> Iterator[None]:
    """Run a call to a backend: any httpx error leaves it as ``UpstreamError``."""
    try:
        yield
    except httpx.HTTPError as exc:
        raise UpstreamError(describe(exc)) from exc


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    backend: BackendConfig
    path: str  # e.g. /v1/chat/completions
    body: bytes
    headers: dict[str, str]

    @property
    def url(self) -> str:
        return f"{self.backend.url}{self.path}"


class NoCookies(httpx.Cookies):
    """A cookie jar that keeps nothing. The one client serves every tenant's requests: a
    cookie one answer set (a load balancer's sticky session, an app's session) must not
    ride on the next tenant's request. Not reading ``Set-Cookie`` also saves the work httpx
    does on every answer to look for one."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set_cookie_header(self, request: httpx.Request) -> None:
        return None


def make_client(timeout_s: float) -> httpx.AsyncClient:
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(connect=5.0, read=timeout_s, write=30.0, pool=None),
        transport=FastTransport(keepalive_expiry=30, max_idle_per_origin=512),
        trust_env=False,  # loopback backends must not go through an HTTP proxy
    )
    client._cookies = NoCookies()  # the setter would copy it into a plain jar
    return client


def headers_for(backend: BackendConfig, request_id: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Upstream headers: the backend's own key (never the client's) and our request id."""
    headers = {"content-type": "application/json", "x-request-id": request_id}
    if backend.api_key:
        headers["authorization"] = f"Bearer {backend.api_key}"
    if extra:
        headers.update(extra)
    return headers


_URLS_KEPT = 1024  # parsed upstream URLs (backends x paths; a reload may add some)


class RawHeaders:
    """An answer's headers as they came; ``get`` by name, any case (the first such header)."""

    __slots__ = ("raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self.raw = raw

    def get(self, name: str, default: str | None = None) -> str | None:
        key = name.lower().encode("latin-1")
        for found, value in self.raw:
            if found.lower() == key:
                return value.decode("latin-1")
        return default


class Answer:
    """A backend's answer on the direct path: what the request path reads of an
    ``httpx.Response`` (``status_code``, ``headers.get``, ``content`` once read, ``aread``,
    ``aiter_raw``, ``aclose``, ``is_closed``), built from the transport's parts."""

    __slots__ = ("status_code", "headers", "is_closed", "_body", "_content")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: httpx.AsyncByteStream) -> None:
        self.status_code = status
        self.headers = RawHeaders(headers)
        self.is_closed = False  # closed, or read whole by ``aread``
        self._body = body
        self._content: bytes | None = None

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise httpx.ResponseNotRead()
        return self._content

    async def aread(self) -> bytes:
        if self._content is None:
            self._content = b"".join([chunk async for chunk in self._body])
            self.is_closed = True
        return self._content

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._body.__aiter__()

    async def aclose(self) -> None:
        self.is_closed = True
        await self._body.aclose()


UpstreamResponse = Answer | httpx.Response


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a plain-HTTP upstream URL's requests go, and how its head names it."""

    origin: tuple[str, int]
    path: bytes  # the request target: the path and query
    host: bytes  # the Host header's value


class Upstream:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self._urls: dict[str, httpx.URL] = {}
        self._targets: dict[str, _Target | None] = {}
        transport = client._transport  # the direct path's, where it is ours (make_client)
        self._direct = transport if isinstance(transport, FastTransport) else None
        t = client.timeout
        self._timeouts: dict[str, Any] = {"connect": t.connect, "read": t.read, "write": t.write}

    def _url(self, url: str) -> httpx.URL:
        """The parsed URL, parsed once: httpx parses a string URL twice per request, about
        half of what building the request costs."""
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= _URLS_KEPT:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    def _target(self, url: str) -> _Target | None:
        """The direct path's target for ``url``; None for a URL it does not take (https)."""
        try:
            return self._targets[url]
        except KeyError:
            pass
        parsed = self._url(url)
        target = None
        if parsed.scheme == "http" and self._direct is not None:
            port = parsed.port
            host = parsed.raw_host + (b":%d" % port if port is not None else b"")
            target = _Target((parsed.host, port or 80), parsed.raw_path, host)
        if len(self._targets) >= _URLS_KEPT:
            self._targets.clear()
        self._targets[url] = target
        return target

    async def open(self, call: UpstreamCall, stream: bool) -> UpstreamResponse:
        """Send the request; for streams, return once the status and headers are in."""
        target = self._target(call.url)
        with upstream_errors():
            if target is not None:
                assert self._direct is not None
                message = encode_post(target.path, target.host, call.headers, len(call.body)) + call.body
                status, headers, body = await self._direct.send_message(target.origin, "POST", message,
                                                                          self._timeouts)
                response: UpstreamResponse = Answer(status, headers, body)
            else:
                request = self.client.build_request("POST", self._url(call.url), content=call.body,
                                                    headers=call.headers)
                response = await self.client.send(request, stream=True)
            if not stream:
                try:
                    await response.aread()
                finally:
                    await response.aclose()
            return response


def describe(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "closed the connection unexpectedly"
    return exc.__class__.__name__
