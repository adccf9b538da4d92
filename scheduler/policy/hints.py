"""Do a tenant's length hints hold? ``x-triage-expected-tokens`` buys a place in the
queue, so even a key trusted with hints (``api_keys[].trust_hints``) keeps that trust
only while its replies bear the hints out.

Each finished request that came with a hint is compared with its real length: a reply
longer than ``tolerance`` times the hint plus ``slack_tokens`` *ran long*. A tenant's
share of hints that ran long is an exponentially weighted mean (``alpha``); above
``distrust_above`` (after ``min_seen`` hinted replies) its hints are ignored. Hinted
requests are still compared while ignored, so a tenant whose hints hold again wins the
trust back. Hints that run *short* cost nothing: over-estimating only delays oneself.

The rule is three pure functions over a frozen :class:`HintRecord` (:func:`ran_long`,
:func:`updated`, :func:`believed`); :class:`HintTrust` only keeps one record per tenant.
That state is per replica and per tenant (tenants are the configured keys', so it is
bounded).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HintParams:
    """How far a hint may be off, and how many misses cost a tenant its trust."""

    tolerance: float = 2.0  # a reply up to this many times its hint (plus the slack) holds
    slack_tokens: int = 32  # so that a hint of a few tokens is not missed by a few more
    alpha: float = 0.2  # weight of the newest reply in the running share of long ones
    distrust_above: float = 0.5  # a share of long replies above this loses the trust
    min_seen: int = 5  # hinted replies before the share counts


@dataclass(frozen=True, slots=True)
class HintRecord:
    """What one tenant's hinted replies have shown so far."""

    seen: int = 0  # hinted replies compared
    long_share: float = 0.0  # exponentially weighted share of those that ran long


def ran_long(hint: int, actual_tokens: int, params: HintParams = HintParams()) -> bool:
    """Did a reply run long of its hint? Longer than ``tolerance`` x hint + ``slack_tokens``."""
    return actual_tokens > params.tolerance * hint + params.slack_tokens


def updated(record: HintRecord, hint: int, actual_tokens: int, params: HintParams = HintParams()) -> HintRecord:
    """What does a tenant's record say once one more hinted reply has been compared? One
    more seen, and the share of long replies moved ``alpha`` of the way to this one."""
    miss = 1.0 if ran_long(hint, actual_tokens, params) else 0.0
    return HintRecord(record.seen + 1, record.long_share + params.alpha * (miss - record.long_share))


def believed(record: HintRecord | None, params: HintParams = HintParams()) -> bool:
    """May a tenant with this record have its next hint believed? Yes until ``min_seen``
    hinted replies were compared (None: none yet), then while the share that ran long is
    at most ``distrust_above``."""
    return record is None or record.seen < params.min_seen or record.long_share <= params.distrust_above


class HintTrust:
    """Whose length hints hold: one :class:`HintRecord` per tenant, on this replica."""

    def __init__(self, params: HintParams | None = None) -> None:
        self.params = params or HintParams()
        self._tenants: dict[str, HintRecord] = {}

    def trusted(self, tenant: str) -> bool:
        """May this tenant's next hint be believed?"""
        return believed(self._tenants.get(tenant), self.params)

    def observe(self, tenant: str, hint: int, actual_tokens: int) -> None:
        """A hinted request of ``tenant`` finished with ``actual_tokens`` output tokens."""
        self._tenants[tenant] = updated(self._tenants.get(tenant, HintRecord()), hint, actual_tokens, self.params)

    def record(self, tenant: str) -> HintRecord | None:
        """What this tenant's hinted replies have shown (None: no hinted reply yet)."""
        return self._tenants.get(tenant)
