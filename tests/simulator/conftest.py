"""Fixtures for simulator tests: real servers on loopback, and a stats poller."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    """A fast-profile simulator shared by the tests of one module."""
    with running_simulator(SimSettings(profile="fast", model=MODEL)) as url:
        yield url


@pytest.fixture
async def http(sim_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim_url, timeout=30) as client:
        yield client


@pytest.fixture
async def openai_client(sim_url: str) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(base_url=f"{sim_url}/v1", api_key="unused", max_retries=0, timeout=30)
    yield client
    await client.close()


async def wait_for_stats(
    client: httpx.AsyncClient, predicate: Callable[[dict[str, Any]], bool], attempts: int = 500
) -> dict[str, Any]:
    """Poll ``/sim/stats`` until ``predicate`` holds (bounded: about 5 s)."""
    stats: dict[str, Any] = {}
    for _ in range(attempts):
        stats = (await client.get("/sim/stats")).json()
        if predicate(stats):
            return stats
        await asyncio.sleep(0.01)
    raise AssertionError(f"/sim/stats never matched; last: {stats}")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text to ``{"name{labels}": value}`` (comments skipped)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples
