"""Keys created through ``/admin/keys``, shared by every replica through Redis.

Redis holds only each key's SHA-256 and its record (id, tenant, tier, admin flag,
quotas); the key itself is shown once, in the answer to its creation. Every change
bumps a version (``keys.lua``). Each replica keeps a copy of all records and checks
the version every ``key_sync_s``: when it moved, the copy is read again whole, so a
revoked key is refused by every replica within about that long. Authentication reads
only the copy (no Redis round trip per request). Keys from the config file stand beside
these (``auth.py``); they are not listed or revoked here.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.settings import QuotaSettings, hash_key
from scheduler import tasks
from scheduler.queue.keys import ApiKeyKeys
from scheduler.queue.scripts import KeyScripts

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    tenant: str
    tier: str
    admin: bool
    quotas: QuotaSettings | None
    created: float

    def pack(self) -> str:
        return orjson.dumps({
            "id": self.id, "tenant": self.tenant, "tier": self.tier, "admin": self.admin,
            "quotas": self.quotas.model_dump(exclude_none=True) if self.quotas else None, "created": self.created,
        }).decode()

    @classmethod
    def unpack(cls, raw: bytes | str) -> KeyRecord:
        d: dict[str, Any] = orjson.loads(raw)
        quotas = QuotaSettings.model_validate(d["quotas"]) if d.get("quotas") else None
        return cls(d["id"], d["tenant"], d["tier"], bool(d["admin"]), quotas, float(d["created"]))

    def view(self) -> dict[str, Any]:
        """What ``GET /admin/keys`` shows: never the key, nor its hash."""
        return {
            "id": self.id, "tenant": self.tenant, "tier": self.tier, "admin": self.admin,
            "quotas": self.quotas.model_dump(exclude_none=True) if self.quotas else None,
            "created": int(self.created), "source": "api",
        }


class KeyStore:
    def __init__(self, redis: Redis, prefix: str, sync_s: float = 1.0) -> None:
        self._redis = redis
        self._keys = ApiKeyKeys(prefix)
        self._scripts = KeyScripts(redis)
        self.sync_s = sync_s
        self.by_hash: dict[str, KeyRecord] = {}  # this replica's copy
        self.version: int | None = None  # of the copy
        # a failed read leaves the copy as it was until Redis answers again
        self._syncing = tasks.Periodic(sync_s, self.sync, "keys: sync", log=log)

    async def create(
        self, tenant: str, tier: str, admin: bool, quotas: QuotaSettings | None
    ) -> tuple[str, KeyRecord]:
        """A new key and its record; the key is never stored and cannot be shown again."""
        key = "sk-triage-" + secrets.token_urlsafe(32)
        record = KeyRecord(f"key_{secrets.token_hex(8)}", tenant, tier, admin, quotas, time.time())
        if not await self._scripts.create(self._keys, record.id, hash_key(key), record.pack()):
            raise RuntimeError("key id collision")  # 64 random bits: not expected to happen
        await self.sync()
        return key, record

    async def revoke(self, key_id: str) -> bool:
        changed = bool(await self._scripts.revoke(self._keys, key_id))
        if changed:
            await self.sync()
        return changed

    async def list(self) -> list[KeyRecord]:
        raw = await self._redis.hvals(self._keys.by_hash)  # type: ignore[misc]
        return sorted((KeyRecord.unpack(r) for r in raw), key=lambda r: (r.created, r.id))

    async def sync(self) -> bool:
        """Read every record again if the version moved; True if the copy changed."""
        raw = await self._redis.get(self._keys.version)
        version = int(raw) if raw is not None else 0
        if version == self.version:
            return False
        records = await self._redis.hgetall(self._keys.by_hash)  # type: ignore[misc]
        self.by_hash = {
            (d.decode() if isinstance(d, bytes) else d): KeyRecord.unpack(r) for d, r in records.items()
        }
        self.version = version
        return True

    async def start(self) -> None:
        try:
            await self.sync()
        except RedisError as exc:
            log.warning("keys: first read failed (%s); retrying every %.1f s", exc, self.sync_s)
        self._syncing.start()

    async def stop(self) -> None:
        await self._syncing.stop()
