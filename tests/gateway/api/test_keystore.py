"""``KeyStore`` against the embedded Valkey: Redis holds hashes and records, never a key;
each replica's copy follows the version, so a revoked key is gone from every copy."""

from __future__ import annotations

from redis.asyncio import Redis

from gateway.api.keystore import KeyRecord, KeyStore
from gateway.settings import QuotaSettings, hash_key
from scheduler.queue.keys import ApiKeyKeys


async def test_a_created_key_is_in_every_replicas_copy_by_its_hash_until_revoked(redis: Redis, prefix: str) -> None:
    here, there = KeyStore(redis, prefix), KeyStore(redis, prefix)
    quotas = QuotaSettings(requests_per_minute=60)

    key, record = await here.create("t1", "batch", False, quotas)

    assert key.startswith("sk-triage-") and record.id.startswith("key_")
    assert here.by_hash[hash_key(key)] == record  # the creating replica knows at once
    assert await there.sync() is True  # the other one at its next sync
    assert there.by_hash[hash_key(key)] == record
    assert await there.sync() is False  # nothing moved since
    stored = await redis.hgetall(ApiKeyKeys(prefix).by_hash)
    assert list(stored) == [hash_key(key).encode()]
    assert key.encode() not in b"".join(stored.values())  # the key itself is never stored

    assert await here.revoke(record.id) is True
    assert here.by_hash == {}
    assert await there.sync() is True and there.by_hash == {}
    assert await here.revoke(record.id) is False  # already gone


async def test_list_is_in_creation_order(redis: Redis, prefix: str) -> None:
    store = KeyStore(redis, prefix)
    _, first = await store.create("a", "interactive", True, None)
    _, second = await store.create("b", "batch", False, None)
    assert [r.id for r in await store.list()] == [first.id, second.id]


def test_a_record_survives_its_trip_through_redis_and_its_view_shows_no_secret() -> None:
    record = KeyRecord("key_1", "t1", "batch", True, QuotaSettings(tokens_per_minute=1000), 1700000000.5)
    assert KeyRecord.unpack(record.pack()) == record
    assert KeyRecord.unpack(record.pack().encode()) == record
    assert record.view() == {
        "id": "key_1", "tenant": "t1", "tier": "batch", "admin": True, "quotas": {"tokens_per_minute": 1000},
        "created": 1700000000, "source": "api",
    }
