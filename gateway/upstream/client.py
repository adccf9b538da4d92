"""Calls to backends over httpx. ``upstream_errors`` is the one place httpx errors
become ``UpstreamError``: every call to a backend (requests, streams, probes) runs in it.

One ``AsyncClient`` serves every backend, over ``FastTransport`` (``transport.py``:
keep-alive connections per host, O(1) per request). Streams are opened with
``send(stream=True)`` so the status is known before the client's response starts; the
caller must close them (``RelayResponse`` does).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

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


class Upstream:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self._urls: dict[str, httpx.URL] = {}

    def _url(self, url: str) -> httpx.URL:
        """The parsed URL, parsed once: httpx parses a string URL twice per request, about
        half of what building the request costs."""
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= _URLS_KEPT:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    async def open(self, call: UpstreamCall, stream: bool) -> httpx.Response:
        """Send the request; for streams, return once the status and headers are in."""
        request = self.client.build_request("POST", self._url(call.url), content=call.body, headers=call.headers)
        with upstream_errors():
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
