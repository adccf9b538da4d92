"""Quotas as policy: which limits apply to a request, and what it reserves.

The mechanism (``scheduler/quotas.py`` and ``queue/lua/quota.lua``) enforces what
these functions decide; nothing here touches Redis.

A limit is a leaky bucket per minute: ``requests_per_minute`` and
``tokens_per_minute`` (input + output) refill continuously at limit / 60 per
second, so a quota is never a burst at the top of each minute. ``concurrent``
counts requests admitted and not yet finished. ``None`` (or 0) means no limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WINDOW_S = 60.0  # the per-minute limits refill over this many seconds
CHARS_PER_TOKEN = 4.0  # the input estimate before the backend counts the prompt


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """Limits of one scope (a tenant, or one key). ``None``: that limit is off."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent: int | None = None

    @property
    def any(self) -> bool:
        return bool(self.requests_per_minute or self.tokens_per_minute or self.concurrent)


@dataclass(frozen=True, slots=True)
class QuotaPlan:
    """What admission checks for one request: its two scopes and its reservation."""

    tenant: str
    key_id: str
    tenant_limits: QuotaLimits
    key_limits: QuotaLimits
    reserve_tokens: int  # input estimate + expected output, settled at completion


def limits_for(
    tenant: str, defaults: QuotaLimits, tenants: dict[str, QuotaLimits], key_limits: QuotaLimits | None
) -> tuple[QuotaLimits, QuotaLimits]:
    """Which limits bind a request of ``tenant`` sent with a key? The tenant's own entry,
    else the default for every tenant; and the key's own limits (none unless set)."""
    return tenants.get(tenant, defaults), key_limits or QuotaLimits()


def reserve_tokens(prompt_chars: int, predicted_output: float, max_tokens: int | None) -> int:
    """How many tokens does a request hold against its tokens-per-minute until it ends?
    The prompt's estimate (characters / 4) plus the predicted output, never more output
    than ``max_tokens``. The real count replaces it when the request completes."""
    output = predicted_output if max_tokens is None else min(predicted_output, max_tokens)
    return max(1, math.ceil(prompt_chars / CHARS_PER_TOKEN) + math.ceil(max(0.0, output)))


def plan(
    tenant: str, key_id: str, defaults: QuotaLimits, tenants: dict[str, QuotaLimits],
    key_limits: QuotaLimits | None, reserve: int,
) -> QuotaPlan | None:
    """The checks one request needs; ``None`` when no limit applies (no Redis call at all)."""
    tenant_limits, own = limits_for(tenant, defaults, tenants, key_limits)
    if not (tenant_limits.any or own.any):
        return None
    return QuotaPlan(tenant, key_id, tenant_limits, own, reserve)
