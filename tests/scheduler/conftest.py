"""The scheduler's tests run the real Lua on every Redis-protocol server this run has:
the embedded Valkey, and REDIS_URL's server when it is set (``any_redis_url``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis


@pytest.fixture
async def redis(any_redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(any_redis_url)
    yield client
    await client.aclose()
