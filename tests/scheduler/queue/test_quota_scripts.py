"""quota.lua, quota_settle.lua and quota_renew.lua against a real Redis-protocol server."""

from __future__ import annotations

from redis.asyncio import Redis

from scheduler.queue.keys import QuotaKeys
from scheduler.queue.scripts import QuotaScripts, ScopeLimits

OFF = ScopeLimits()


async def test_requests_per_minute_admits_up_to_the_limit_then_says_when(redis: Redis, prefix: str) -> None:
    s, keys = QuotaScripts(redis), QuotaKeys(prefix, "t1", "k1")
    limits = ScopeLimits(requests_per_minute=3)
    results = [await s.admit(keys, f"r{i}", 10, 30, limits, OFF) for i in range(4)]
    assert [r.allowed for r in results] == [1, 1, 1, 0]
    refused = results[3]
    assert (refused.failed_scope, refused.failed_limit) == (1, "requests")
    assert 0 < refused.retry_after_s <= 20  # one request drains in 60 / 3 s
    assert [r.scopes[0].requests_remaining for r in results[:3]] == [2, 1, 0]
    assert refused.scopes[0].requests_limit == 3


async def test_a_refusal_charges_no_scope(redis: Redis, prefix: str) -> None:
    """The key's limit refuses: the tenant's bucket is left as it was (all or nothing)."""
    s, keys = QuotaScripts(redis), QuotaKeys(prefix, "t1", "k1")
    tenant, key = ScopeLimits(requests_per_minute=100), ScopeLimits(requests_per_minute=1)
    assert (await s.admit(keys, "a", 1, 30, tenant, key)).allowed == 1
    second = await s.admit(keys, "b", 1, 30, tenant, key)
    assert (second.allowed, second.failed_scope) == (0, 2)
    assert second.scopes[0].requests_remaining == 99  # only "a" was charged
    assert await redis.zscore(keys.tenant_running, "b") is None


async def test_tokens_reserve_then_settle_to_the_real_count(redis: Redis, prefix: str) -> None:
    s, keys = QuotaScripts(redis), QuotaKeys(prefix, "t1", "k1")
    limits = ScopeLimits(tokens_per_minute=1000)
    first = await s.admit(keys, "a", 600, 30, limits, OFF)
    assert first.allowed == 1 and first.scopes[0].tokens_remaining <= 400
    refused = await s.admit(keys, "b", 600, 30, limits, OFF)
    assert (refused.allowed, refused.failed_limit) == (0, "tokens")
    assert await s.settle(keys, "a", 100 - 600, 1000, 0)  # it used 100, not 600
    assert not await s.settle(keys, "a", -500, 1000, 0)  # twice changes nothing
    again = await s.admit(keys, "b", 600, 30, limits, OFF)
    assert again.allowed == 1
    assert again.scopes[0].tokens_remaining <= 300


async def test_a_reservation_above_the_limit_can_never_pass(redis: Redis, prefix: str) -> None:
    s, keys = QuotaScripts(redis), QuotaKeys(prefix, "t1", "k1")
    result = await s.admit(keys, "big", 5000, 30, OFF, ScopeLimits(tokens_per_minute=1000))
    assert (result.allowed, result.failed_scope, result.failed_limit) == (-1, 2, "tokens")


async def test_concurrency_counts_running_requests_until_they_settle(redis: Redis, prefix: str) -> None:
    s, keys = QuotaScripts(redis), QuotaKeys(prefix, "t1", "k1")
    limits = ScopeLimits(concurrent=2)
    assert [(await s.admit(keys, f"r{i}", 1, 30, limits, OFF)).allowed for i in range(3)] == [1, 1, 0]
    assert await s.settle(keys, "r0", 0, 0, 0)
    assert (await s.admit(keys, "r3", 1, 30, limits, OFF)).allowed == 1


async def test_the_same_request_admitted_twice_is_charged_once(redis: Redis, prefix: str) -> None:
    """A retried call (its reply lost) finds the id running and charges nothing."""
    s, keys = QuotaScripts(redis), QuotaKeys(prefix, "t1", "k1")
    limits = ScopeLimits(requests_per_minute=1, concurrent=1)
    assert (await s.admit(keys, "a", 1, 30, limits, OFF)).allowed == 1
    assert (await s.admit(keys, "a", 1, 30, limits, OFF)).allowed == 1
    assert (await s.admit(keys, "b", 1, 30, limits, OFF)).allowed == 0


async def test_an_entry_not_renewed_expires_and_renewal_keeps_it(redis: Redis, prefix: str) -> None:
    s, keys = QuotaScripts(redis), QuotaKeys(prefix, "t1", "k1")
    limits = ScopeLimits(concurrent=1)
    assert (await s.admit(keys, "a", 1, 0.05, limits, OFF)).allowed == 1
    await s.renew([keys.tenant_running, keys.key_running], 30, ["a"])
    score = await redis.zscore(keys.tenant_running, "a")
    assert score is not None
    assert (await s.admit(keys, "b", 1, 30, limits, OFF)).allowed == 0  # "a" still holds the slot
    await s.renew([keys.tenant_running], -1, ["a"])  # as if its replica went silent: already expired
    assert (await s.admit(keys, "b", 1, 30, limits, OFF)).allowed == 1
    await s.renew([keys.tenant_running], 30, ["ghost"])  # XX: nothing unknown is added
    assert await redis.zscore(keys.tenant_running, "ghost") is None
