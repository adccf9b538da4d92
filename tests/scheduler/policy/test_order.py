"""The queue-order policies as pure functions, table-tested."""

from __future__ import annotations

import pytest

from scheduler.policy.order import PolicyName, PolicyParams, order
from scheduler.types import QueueOrder

P = PolicyParams(max_slack_s=30.0, slack_per_token_s=0.02, tier_offsets_s={"interactive": 0.0, "batch": 60.0})


@pytest.mark.parametrize(
    ("policy", "tokens", "tier", "expected"),
    [
        (PolicyName.FIFO, 10, "interactive", QueueOrder(0.0, 0.0, 0.0)),
        (PolicyName.FIFO, 5000, "batch", QueueOrder(0.0, 0.0, 0.0)),
        (PolicyName.SHORT_FIRST, 50, "interactive", QueueOrder(1.0, 0.0, 1.0)),
        (PolicyName.SHORT_FIRST, 1500, "interactive", QueueOrder(30.0, 0.0, 30.0)),
        (PolicyName.SHORT_FIRST, 5000, "interactive", QueueOrder(30.0, 0.0, 100.0)),  # slack capped, cost not
        (PolicyName.SHORT_FIRST, 50, "batch", QueueOrder(1.0, 60.0, 1.0)),
        (PolicyName.SHORT_FIRST, 0, "interactive", QueueOrder(0.0, 0.0, 0.02)),
        (PolicyName.STRICT_PRIORITY, 5000, "interactive", QueueOrder(0.0, 0.0, 0.0)),
        (PolicyName.STRICT_PRIORITY, 5, "batch", QueueOrder(0.0, 1e6, 0.0)),
        (PolicyName.ORACLE, 50, "interactive", QueueOrder(1.0, 0.0, 1.0)),
    ],
)
def test_order(policy: PolicyName, tokens: float, tier: str, expected: QueueOrder) -> None:
    got = order(policy, tokens, tier, "t", P)
    assert got == pytest.approx(expected)  # type: ignore[comparison-overlap]


def test_slack_grows_with_length_and_stays_under_the_bound() -> None:
    slacks = [order(PolicyName.SHORT_FIRST, n, "interactive", "t", P).slack_s for n in (1, 10, 100, 1000, 10**6)]
    assert slacks == sorted(slacks)
    assert max(slacks) == P.max_slack_s


def test_weight_divides_cost() -> None:
    params = PolicyParams(tenant_weights={"gold": 4.0})
    assert order(PolicyName.SHORT_FIRST, 100, "interactive", "gold", params).cost_s == pytest.approx(0.5)
    assert order(PolicyName.SHORT_FIRST, 100, "interactive", "other", params).cost_s == pytest.approx(2.0)
