"""Do a tenant's length hints hold? ``x-triage-expected-tokens`` buys a place in the
queue, so even a key trusted with hints (``api_keys[].trust_hints``) keeps that trust
only while its replies bear the hints out.

Each finished request that came with a hint is compared with its real length: a reply
longer than ``TOLERANCE`` times the hint plus ``SLACK_TOKENS`` *ran long*. A tenant's
share of hints that ran long is an exponentially weighted mean (``ALPHA``); above
``DISTRUST_ABOVE`` (after ``MIN_SEEN`` hinted replies) its hints are ignored. Hinted
requests are still compared while ignored, so a tenant whose hints hold again wins the
trust back. Hints that run *short* cost nothing: over-estimating only delays oneself.

State is per replica and per tenant (tenants are the configured keys', so it is bounded).
"""

from __future__ import annotations

from dataclasses import dataclass

TOLERANCE = 2.0
SLACK_TOKENS = 32
ALPHA = 0.2
DISTRUST_ABOVE = 0.5
MIN_SEEN = 5


@dataclass(slots=True)
class _Record:
    seen: int = 0
    long_share: float = 0.0


class HintTrust:
    def __init__(self) -> None:
        self._tenants: dict[str, _Record] = {}

    def trusted(self, tenant: str) -> bool:
        """May this tenant's next hint be believed?"""
        record = self._tenants.get(tenant)
        return record is None or record.seen < MIN_SEEN or record.long_share <= DISTRUST_ABOVE

    def observe(self, tenant: str, hint: int, actual_tokens: int) -> None:
        """A hinted request of ``tenant`` finished with ``actual_tokens`` output tokens."""
        record = self._tenants.setdefault(tenant, _Record())
        ran_long = 1.0 if actual_tokens > TOLERANCE * hint + SLACK_TOKENS else 0.0
        record.seen += 1
        record.long_share += ALPHA * (ran_long - record.long_share)
