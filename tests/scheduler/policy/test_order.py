"""The queue-order policies as pure functions, table-tested."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.policy.order import (
    Part,
    PolicyName,
    PolicyParams,
    continuation_order,
    order,
    part_id,
    request_of,
    requeue_order,
    retry_order,
)
from scheduler.types import QueueOrder, Ticket

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


@pytest.mark.parametrize(("tokens", "slack"), [(0, 0.0), (50, 1.0), (256, 5.12), (257, 30.0), (600, 30.0), (10**6, 30.0)])
def test_the_short_lane_keeps_longer_work_in_arrival_order(tokens: float, slack: float) -> None:
    """With the short lane, short work is ordered by its length; everything longer than the lane
    takes the whole bound, so it keeps its arrival order among itself (a medium request never
    overtakes a long one that came before it) and only short work overtakes it."""
    lane = replace(P, lane_max_tokens=256.0)
    assert order(PolicyName.SHORT_FIRST, tokens, "interactive", "t", lane).slack_s == pytest.approx(slack)
    assert order(PolicyName.ORACLE, tokens, "interactive", "t", lane).slack_s == pytest.approx(slack)


def test_the_short_lane_leaves_the_other_parts_of_the_order_alone() -> None:
    lane = replace(P, lane_max_tokens=256.0)
    for tokens in (50, 600):
        assert order(PolicyName.SHORT_FIRST, tokens, "batch", "t", lane).tier_offset_s == 60.0
        assert order(PolicyName.SHORT_FIRST, tokens, "interactive", "t", lane).cost_s == pytest.approx(
            order(PolicyName.SHORT_FIRST, tokens, "interactive", "t", P).cost_s)
    assert order(PolicyName.FIFO, 600, "interactive", "t", lane) == QueueOrder(0.0, 0.0, 0.0)


def test_weight_divides_cost() -> None:
    params = PolicyParams(tenant_weights={"gold": 4.0})
    assert order(PolicyName.SHORT_FIRST, 100, "interactive", "gold", params).cost_s == pytest.approx(0.5)
    assert order(PolicyName.SHORT_FIRST, 100, "interactive", "other", params).cost_s == pytest.approx(2.0)


# Tickets of a request's later parts.


@pytest.mark.parametrize(("base", "kind", "n", "want"), [
    ("r1", Part.RETRY, 0, "r1-retry"),
    ("r1", Part.OVERLOAD, 1, "r1-o1"),
    ("r1", Part.OVERLOAD, 12, "r1-o12"),
    ("r1", Part.PAUSE, 2, "r1-p2"),
    ("r1-retry", Part.OVERLOAD, 1, "r1-retry-o1"),
])
def test_part_id(base: str, kind: Part, n: int, want: str) -> None:
    assert part_id(base, kind, n) == want
    assert request_of(want) == "r1"


@pytest.mark.parametrize(("ticket_id", "request_id"), [
    ("req-0af3", "req-0af3"),
    ("req-0af3-p2", "req-0af3"),
    ("req-0af3-retry-o1-p1-retry-o12", "req-0af3"),
    ("req-0af3-op1", "req-0af3-op1"),  # not a suffix part_id makes
    ("req-0af3-p", "req-0af3-p"),
])
def test_request_of(ticket_id: str, request_id: str) -> None:
    assert request_of(ticket_id) == request_id


T = Ticket(
    id="r1", model="m", tenant="t", cls="short", predicted=50, timeout_s=30.0, tier="batch", slack_s=1.0,
    tier_offset_s=60.0, cost_s=1.0, avoid="", restricted=True, age_s=0.0, pauses=0,
)


@pytest.mark.parametrize(("case", "got", "want"), [
    ("retry: front of its tier, avoiding the failed backend",
     retry_order(T, "b1"), replace(T, id="r1-retry", avoid="b1", slack_s=-60.0)),
    ("overload: front of its tier, arrival and what is left of the deadline, any backend",
     requeue_order(replace(T, avoid="b1"), 2, 4.5, 25.5),
     replace(T, id="r1-o2", slack_s=-60.0, age_s=4.5, timeout_s=25.5)),
    ("continuation: first in line, one more pause, no second charge",
     continuation_order(T, 7.0), replace(T, id="r1-p1", pauses=1, age_s=7.0, slack_s=0.0, cost_s=0.0)),
    ("a second pause is named by the request, not by the part; the rest is kept",
     continuation_order(replace(T, id="r1-p1-retry-o1", pauses=1, avoid="b2"), 9.0),
     replace(T, id="r1-p2", pauses=2, age_s=9.0, slack_s=0.0, cost_s=0.0, avoid="b2")),
    ("the request's id, when given, names it",
     continuation_order(replace(T, id="x-o1"), 1.0, request_id="x-o1"),
     replace(T, id="x-o1-p1", pauses=1, age_s=1.0, slack_s=0.0, cost_s=0.0)),
])
def test_later_parts(case: str, got: Ticket, want: Ticket) -> None:
    assert got == want, case
