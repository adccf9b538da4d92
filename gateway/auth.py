"""Client keys -> tenant and tier. Only SHA-256 digests of keys are configured or kept."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gateway.errors import GatewayError
from gateway.settings import Settings


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    tier: str
    admin: bool
    trust_hints: bool = False  # may send x-triage-expected-tokens (api_keys[].trust_hints)


class Authenticator:
    def __init__(self, settings: Settings) -> None:
        self._keys = {k.sha256: Principal(k.tenant, k.tier, k.admin, trust_hints=k.trust_hints) for k in settings.api_keys}
        # open mode (no keys): one operator's own traffic, hints and all
        self._open = Principal("default", settings.tiers[0], True, trust_hints=True)
        self._tiers = list(settings.tiers)  # most urgent first

    @property
    def required(self) -> bool:
        return bool(self._keys)

    def authenticate(self, authorization: str | None) -> Principal:
        if not self._keys:
            return self._open
        if not authorization or not authorization.lower().startswith("bearer "):
            raise GatewayError(
                401, "Missing API key: send 'Authorization: Bearer <key>'.", "authentication_error",
                "invalid_api_key",
            )
        digest = hashlib.sha256(authorization[7:].strip().encode()).hexdigest()
        principal = self._keys.get(digest)
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
