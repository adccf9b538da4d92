"""``Quotas`` (``scheduler/quotas.py``): admit against a tenant's and a key's limits, settle with the real count,
renew while running — against a real Redis-protocol server."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from scheduler.errors import QuotaExceeded, SchedulerUnavailable
from scheduler.policy.quota import QuotaLimits
from scheduler.queue.keys import QuotaKeys
from scheduler.quotas import Hold, Quotas
from tests.support import eventually

TENANT = "acme"


@pytest.fixture
async def make(redis: Redis, prefix: str) -> AsyncIterator[Callable[..., Quotas]]:
    made: list[Quotas] = []

    def build(**kw: object) -> Quotas:
        quotas = Quotas(redis, prefix, **kw)  # type: ignore[arg-type]
        made.append(quotas)
        return quotas

    yield build
    for quotas in made:
        await quotas.stop()


async def admit(quotas: Quotas, request_id: str, reserve: int = 1, key_id: str = "",
                key: QuotaLimits | None = None) -> Hold:
    plan = quotas.plan(TENANT, key_id, key, reserve)
    assert plan is not None
    return await quotas.admit(plan, request_id)


def keys(prefix: str, key_id: str = "-") -> QuotaKeys:
    return QuotaKeys(prefix, TENANT, key_id)


async def tokens_held(redis: Redis, prefix: str) -> float:
    """The tenant's tokens bucket as Redis holds it (it only drains with time)."""
    return float(await redis.hget(keys(prefix).tenant_bucket, "t") or 0)


async def test_no_limit_anywhere_needs_no_plan(make) -> None:
    quotas = make()
    assert quotas.plan(TENANT, "k", None, 10) is None
    assert quotas.plan(TENANT, "k", QuotaLimits(concurrent=1), 10) is not None  # the key's own
    quotas.tenants = {TENANT: QuotaLimits(requests_per_minute=5)}
    assert quotas.plan(TENANT, "", None, 10) is not None
    assert quotas.plan("other", "", None, 10) is None  # the default (none) for everyone else


async def test_a_limit_refuses_with_its_rate_limit_numbers(make, redis: Redis, prefix: str) -> None:
    quotas = make(defaults=QuotaLimits(requests_per_minute=2))
    first = await admit(quotas, "r1")
    assert first.limits.requests is not None and first.limits.requests[:2] == (2, 1)
    assert first.limits.tokens is None  # no such limit
    second = await admit(quotas, "r2")
    assert second.limits.requests is not None and second.limits.requests[:2] == (2, 0)
    with pytest.raises(QuotaExceeded) as err:
        await admit(quotas, "r3")
    refused = err.value
    assert refused.limit == "requests" and f"tenant '{TENANT}'" in str(refused)
    assert refused.retry_after_s is not None and 0 < refused.retry_after_s <= 30  # one request drains in 30 s
    assert refused.limits is not None and refused.limits.requests is not None
    assert refused.limits.requests[:2] == (2, 0) and refused.limits.requests[2] > 0
    assert await redis.zscore(keys(prefix).tenant_running, "r3") is None  # nothing charged


async def test_the_numbers_are_the_tighter_scopes(make) -> None:
    quotas = make(defaults=QuotaLimits(requests_per_minute=100))
    key = QuotaLimits(requests_per_minute=3)
    hold = await admit(quotas, "r1", key_id="k1", key=key)
    assert hold.limits.requests is not None and hold.limits.requests[:2] == (3, 2)  # the key's: less left
    await admit(quotas, "r2", key_id="k1", key=key)
    await admit(quotas, "r3", key_id="k1", key=key)
    with pytest.raises(QuotaExceeded) as err:
        await admit(quotas, "r4", key_id="k1", key=key)
    assert "key 'k1'" in str(err.value)
    other = await admit(quotas, "r5", key_id="k2", key=key)  # another key of the tenant: its own bucket
    assert other.limits.requests is not None and other.limits.requests[:2] == (3, 2)


async def test_a_reservation_above_the_limit_is_refused_for_good(make) -> None:
    quotas = make(defaults=QuotaLimits(tokens_per_minute=1000))
    with pytest.raises(QuotaExceeded) as err:
        await admit(quotas, "big", reserve=5000)
    assert err.value.limit == "tokens" and err.value.retry_after_s is None  # no wait helps
    assert "too large" in str(err.value)


async def test_settle_replaces_the_reservation_with_the_real_count(make, redis: Redis, prefix: str) -> None:
    quotas = make(defaults=QuotaLimits(tokens_per_minute=1000))
    hold = await admit(quotas, "r1", reserve=600)
    assert hold.limits.tokens is not None and hold.limits.tokens[:2] == (1000, 400)
    with pytest.raises(QuotaExceeded) as err:
        await admit(quotas, "r2", reserve=600)
    assert err.value.limit == "tokens" and err.value.retry_after_s is not None
    hold.settle(100)
    hold.settle(900)  # once: the first count stands
    assert hold.settled
    await quotas.stop()  # waits for the settle under way
    assert await tokens_held(redis, prefix) <= 100
    assert await redis.zscore(keys(prefix).tenant_running, "r1") is None  # no longer running
    assert (await admit(quotas, "r2", reserve=600)).limits.tokens is not None


async def test_an_unknown_count_leaves_the_reservation(make, redis: Redis, prefix: str) -> None:
    quotas = make(defaults=QuotaLimits(tokens_per_minute=1000))
    hold = await admit(quotas, "r1", reserve=600)
    hold.settle(None)
    await quotas.stop()
    assert await tokens_held(redis, prefix) == 600
    assert await redis.zscore(keys(prefix).tenant_running, "r1") is None


async def test_a_concurrency_slot_comes_back_when_the_request_settles(make, redis: Redis, prefix: str) -> None:
    quotas = make(defaults=QuotaLimits(concurrent=1))
    hold = await admit(quotas, "r1")
    with pytest.raises(QuotaExceeded) as err:
        await admit(quotas, "r2")
    assert err.value.limit == "concurrent"
    hold.settle(1)

    async def ended() -> bool:
        return await redis.zscore(keys(prefix).tenant_running, "r1") is None

    await eventually(ended)
    await admit(quotas, "r2")


async def test_renew_moves_the_expiry_of_running_requests_only(make, redis: Redis, prefix: str) -> None:
    quotas = make(defaults=QuotaLimits(concurrent=5), hold_s=30.0)
    running, done = await admit(quotas, "r1"), await admit(quotas, "r2")
    done.settle(1)
    running_key = keys(prefix).tenant_running

    async def gone() -> bool:
        return await redis.zscore(running_key, "r2") is None

    await eventually(gone)
    before = await redis.zscore(running_key, "r1")
    assert before is not None
    quotas.hold_s = 300.0
    await quotas.renew()
    after = await redis.zscore(running_key, "r1")
    assert after is not None and after - before > 200  # now + 300 s, not now + 30 s
    assert await redis.zscore(running_key, "r2") is None  # a settled request is not brought back
    assert running.settled is False


async def test_the_renew_loop_keeps_a_running_request_alive(make, redis: Redis, prefix: str) -> None:
    quotas = make(defaults=QuotaLimits(concurrent=1), hold_s=30.0, renew_s=0.05)
    await admit(quotas, "r1")
    running_key = keys(prefix).tenant_running
    before = await redis.zscore(running_key, "r1")
    quotas.hold_s = 300.0
    await quotas.start()

    async def renewed() -> bool:
        score = await redis.zscore(running_key, "r1")
        return score is not None and before is not None and score - before > 200

    await eventually(renewed)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_unreachable_store_is_unavailable_not_a_refusal(prefix: str) -> None:
    redis = Redis.from_url(f"redis://127.0.0.1:{closed_port()}", socket_connect_timeout=1)
    try:
        quotas = Quotas(redis, prefix, defaults=QuotaLimits(requests_per_minute=1))
        with pytest.raises(SchedulerUnavailable):
            await admit(quotas, "r1")
    finally:
        await redis.aclose()
