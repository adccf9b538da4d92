"""Queue-order policies: each answers "how much later than its arrival may this ticket go?"

The queue score is ``arrival + slack`` (a virtual deadline, DESIGN.md §2), static once
enqueued, so a sorted set holds the order. A policy is a small pure function of the
prediction and tier; the engine (``dispatcher``) times and records it.

Starvation bound: for every policy here ``0 <= slack <= max_slack + tier offset``, so a
ticket is never overtaken by one that arrived more than ``max_slack`` (plus the tier
gap) seconds after it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class PolicyName(enum.StrEnum):
    FIFO = "fifo"
    SHORT_FIRST = "short_first"
    STRICT_PRIORITY = "strict_priority"
    ORACLE = "oracle"


@dataclass(frozen=True, slots=True)
class PolicyParams:
    max_slack_s: float = 30.0  # the starvation bound
    # slack per predicted output token: about one decode step of a loaded engine, so
    # slack tracks predicted service time (50 tokens -> 1 s, 1,500 tokens -> the cap)
    slack_per_token_s: float = 0.02
    # extra slack per tier; the first tier (interactive) gets none
    tier_offsets_s: dict[str, float] = field(default_factory=lambda: {"interactive": 0.0, "batch": 60.0})


def tier_offset(params: PolicyParams, tier: str) -> float:
    return params.tier_offsets_s.get(tier, 0.0)


def fifo_slack(predicted_tokens: float, tier: str, params: PolicyParams) -> float:
    """Does this ticket go ahead of later arrivals? Always: arrival order."""
    return 0.0


def short_first_slack(predicted_tokens: float, tier: str, params: PolicyParams) -> float:
    """How long may shorter work overtake this ticket? In proportion to its length, capped."""
    own = params.slack_per_token_s * max(0.0, predicted_tokens)
    return min(params.max_slack_s, own) + tier_offset(params, tier)


def strict_priority_slack(predicted_tokens: float, tier: str, params: PolicyParams) -> float:
    """Does a better tier always go first? Yes; inside a tier, arrival order."""
    return tier_offset(params, tier)


SLACK = {
    PolicyName.FIFO: fifo_slack,
    PolicyName.SHORT_FIRST: short_first_slack,
    PolicyName.STRICT_PRIORITY: strict_priority_slack,
    # the oracle is short_first fed the true length (the gateway supplies it as the prediction)
    PolicyName.ORACLE: short_first_slack,
}


def slack(policy: PolicyName, predicted_tokens: float, tier: str, params: PolicyParams) -> float:
    return SLACK[policy](predicted_tokens, tier, params)
