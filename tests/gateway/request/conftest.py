"""Fixtures of the request tests: the backend double on loopback, the gateway's own
upstream client, a backend that hangs up, and a real telemetry for the traces."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from redis.asyncio import Redis

from gateway.upstream.client import Upstream, make_client
from scheduler.backends.backend import BackendConfig
from tests.gateway.request.doubles import HangUp, Seen, Traced, backend, backend_app
from tests.support import running_app


@pytest.fixture(scope="module")
def double() -> Iterator[tuple[str, list[Seen]]]:
    """The backend double's base URL and the requests it got."""
    app, seen = backend_app()
    with running_app(app) as url:
        yield url, seen


@pytest.fixture
def seen(double: tuple[str, list[Seen]]) -> list[Seen]:
    double[1].clear()
    return double[1]


@pytest.fixture
def base(double: tuple[str, list[Seen]]) -> str:
    return double[0]


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    client = make_client(10.0)
    yield Upstream(client)
    await client.aclose()


@pytest.fixture
async def dead_url() -> AsyncIterator[str]:
    async with HangUp() as url:
        yield url


@pytest.fixture
def traced(base: str, dead_url: str, redis: Redis, prefix: str) -> Traced:
    configs = [backend(mode, f"{base}/{mode}") for mode in ("ok", "busy429", "busy503", "bad400", "hang", "part")]
    return Traced([*configs, backend("dead", dead_url)], redis, prefix)


@pytest.fixture
def at(base: str, dead_url: str) -> Callable[[str], BackendConfig]:
    """The backend of a mode of the double (``dead``: the one that hangs up)."""
    return lambda mode: backend(mode, dead_url if mode == "dead" else f"{base}/{mode}")
