"""Client keys -> tenant and tier. Only SHA-256 digests of keys are configured or kept.

Two sources, looked up in this order: the config file's ``api_keys`` (replaced as a
whole by ``reload``), and the keys created through ``/admin/keys`` (``keystore.py``,
this replica's copy of Redis). Keys are required when the config file names any;
with none configured the gateway is open, and a key created through the API still
gives its tenant, tier and quotas to whoever sends it.
"""

from __future__ import annotations

import hashlib

from gateway.api.keystore import KeyStore
from gateway.errors import GatewayError
from gateway.request.context import Principal
from gateway.settings import ApiKeySettings, QuotaSettings, Settings
from scheduler.policy.quota import QuotaLimits


def quota_limits(q: QuotaSettings | None) -> QuotaLimits | None:
    if q is None:
        return None
    return QuotaLimits(q.requests_per_minute, q.tokens_per_minute, q.concurrent)


class Authenticator:
    def __init__(self, settings: Settings, store: KeyStore | None = None) -> None:
        self._store = store
        self.config_keys: list[ApiKeySettings] = []
        self._keys: dict[str, Principal] = {}
        # open mode (no keys): one operator's own traffic, hints and all
        self._open = Principal("default", settings.tiers[0], True, trust_hints=True)
        self._tiers = list(settings.tiers)  # most urgent first
        self.reload(settings)

    def reload(self, settings: Settings) -> None:
        """The config file's keys, replaced whole (a removed key is refused from now on)."""
        self.config_keys = list(settings.api_keys)
        self._keys = {
            k.sha256: Principal(k.tenant, k.tier, k.admin, k.key_id, quota_limits(k.quotas), trust_hints=k.trust_hints)
            for k in settings.api_keys
        }

    def _lookup(self, digest: str) -> Principal | None:
        found = self._keys.get(digest)
        if found is None and self._store is not None:
            record = self._store.by_hash.get(digest)
            if record is not None:
                found = Principal(record.tenant, record.tier, record.admin, record.id, quota_limits(record.quotas))
        return found

    @property
    def required(self) -> bool:
        return bool(self._keys)

    def authenticate(self, authorization: str | None) -> Principal:
        if not self._keys:
            if authorization and authorization.lower().startswith("bearer ") and self._store is not None:
                known = self._lookup(hashlib.sha256(authorization[7:].strip().encode()).hexdigest())
                if known is not None:
                    return known
            return self._open
        if not authorization or not authorization.lower().startswith("bearer "):
            raise GatewayError(
                401, "Missing API key: send 'Authorization: Bearer <key>'.", "authentication_error",
                "invalid_api_key",
            )
        digest = hashlib.sha256(authorization[7:].strip().encode()).hexdigest()
        principal = self._lookup(digest)
        if principal is None:
            raise GatewayError(401, "Incorrect API key provided.", "authentication_error", "invalid_api_key")
        return principal

    def admin(self, authorization: str | None) -> Principal:
        principal = self.authenticate(authorization)
        if not principal.admin:
            raise GatewayError(403, "This endpoint needs an admin key.", "permission_error", "forbidden")
        return principal

    def tier(self, principal: Principal, header: str | None) -> str:
        """A client may ask for its own tier or a less urgent one by header, never a better one."""
        if header is None:
            return principal.tier
        if header not in self._tiers:
            raise GatewayError(
                400, f"x-triage-priority must be one of {self._tiers}", param="x-triage-priority"
            )
        if self._tiers.index(header) < self._tiers.index(principal.tier):
            raise GatewayError(
                403, f"this key may not use tier '{header}'", "permission_error", "forbidden",
                param="x-triage-priority",
            )
        return header
