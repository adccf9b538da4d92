"""Queue-order policies: each answers "how much later than its arrival may this ticket go?"

The queue score is ``arrival + min(max_slack, slack + fairness lead) + tier offset``
(a virtual deadline, docs/scheduling.md), fixed at enqueue, so a sorted set holds the order.
A policy is a small pure function of the prediction, the tier and the tenant's weight;
``enqueue.lua`` adds arrival time and the fairness lead, and the dispatcher times it.

Starvation bound: ``slack + lead`` is capped at ``max_slack``, so a ticket is never
overtaken by one of the same tier that arrived more than ``max_slack`` seconds after it.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.types import QueueOrder, Ticket


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
    # extra delay per tier; the first tier (interactive) gets none
    tier_offsets_s: dict[str, float] = field(default_factory=lambda: {"interactive": 0.0, "batch": 60.0})
    tenant_weights: dict[str, float] = field(default_factory=dict)  # default weight 1
    # the short lane: work predicted above this many tokens takes the whole starvation
    # bound as its slack, so it keeps its arrival order among itself and only short work
    # overtakes it; None: slack grows with the prediction all the way to the bound
    lane_max_tokens: float | None = None


def _cost(predicted_tokens: float, tenant: str, params: PolicyParams) -> float:
    weight = params.tenant_weights.get(tenant, 1.0)
    return params.slack_per_token_s * max(1.0, predicted_tokens) / weight


def fifo(predicted_tokens: float, tier: str, tenant: str, params: PolicyParams) -> QueueOrder:
    """Who goes next? Whoever came first, whatever its length, tier or tenant."""
    return QueueOrder(0.0, 0.0, 0.0)


def short_first(predicted_tokens: float, tier: str, tenant: str, params: PolicyParams) -> QueueOrder:
    """How long may shorter work overtake this ticket? In proportion to its length, capped;
    with the short lane on, work longer than the lane takes the cap whatever its length
    (so among itself it goes in arrival order, and only short work overtakes it)."""
    lane = params.lane_max_tokens
    if lane is not None and predicted_tokens > lane:
        own = params.max_slack_s
    else:
        own = params.slack_per_token_s * max(0.0, predicted_tokens)
    return QueueOrder(
        min(params.max_slack_s, own), params.tier_offsets_s.get(tier, 0.0), _cost(predicted_tokens, tenant, params)
    )


STRICT_TIER_GAP_S = 1e6  # larger than any wait: a lower tier never overtakes a higher one


def strict_priority(predicted_tokens: float, tier: str, tenant: str, params: PolicyParams) -> QueueOrder:
    """Does a better tier always go first? Yes; inside a tier, arrival order."""
    rank = list(params.tier_offsets_s).index(tier) if tier in params.tier_offsets_s else 0
    return QueueOrder(0.0, rank * STRICT_TIER_GAP_S, 0.0)


POLICIES: dict[PolicyName, Callable[[float, str, str, PolicyParams], QueueOrder]] = {
    PolicyName.FIFO: fifo,
    PolicyName.SHORT_FIRST: short_first,
    PolicyName.STRICT_PRIORITY: strict_priority,
    # the oracle is short_first fed the true length (the classifier supplies it)
    PolicyName.ORACLE: short_first,
}


def order(policy: PolicyName, predicted_tokens: float, tier: str, tenant: str, params: PolicyParams) -> QueueOrder:
    return POLICIES[policy](predicted_tokens, tier, tenant, params)


def engine_priority(ticket: Ticket) -> int:
    """What priority does an engine with its own queue get for this ticket? Our order,
    in milliseconds of slack (lower runs first, as vLLM's ``--scheduling-policy priority``)."""
    return round((ticket.slack_s + ticket.tier_offset_s) * 1000)


class Part(enum.StrEnum):
    """Why a request has another ticket: each kind gets its own id suffix."""

    RETRY = "retry"  # a second attempt after a backend failed before answering: ``<id>-retry``
    OVERLOAD = "o"  # queued again after a backend's 429/503: ``<id>-o<n>``
    PAUSE = "p"  # a paused request's next part: ``<id>-p<n>``


def part_id(base: str, kind: Part, n: int = 0) -> str:
    """What is the id of a request's next ticket (and of the lease it is granted)?
    ``base`` with the kind's suffix: ``-retry`` (there is one retry), else ``-o<n>`` or
    ``-p<n>`` for the ``n``-th overload refusal or pause. The one place these ids are made."""
    return f"{base}-{Part.RETRY}" if kind is Part.RETRY else f"{base}-{kind}{n}"


_PART_SUFFIX = re.compile(r"(?:-retry|-o[0-9]+|-p[0-9]+)+\Z")


def request_of(ticket_id: str) -> str:
    """Which request is a ticket a part of? Its id without the suffixes :func:`part_id`
    added (a request's own id never ends in one: the gateway mints ``req-<hex>``)."""
    return _PART_SUFFIX.sub("", ticket_id)


def retry_order(ticket: Ticket, failed: str) -> Ticket:
    """Where does a request go whose backend failed before answering? To the front of
    its tier (a slack that cancels the tier offset), avoiding the backend that failed."""
    return dataclasses.replace(
        ticket, id=part_id(ticket.id, Part.RETRY), avoid=failed, slack_s=-ticket.tier_offset_s
    )


def requeue_order(ticket: Ticket, attempt: int, age_s: float, timeout_s: float) -> Ticket:
    """Where does a request go that a backend refused as overloaded (429/503) before
    answering? Back to the front of its tier, with its original arrival (``age_s`` ago)
    and what is left of its deadline (``timeout_s``; 0: none); any backend may take it
    once its cool-down ends. Each attempt is a ticket of its own (``-o<attempt>``)."""
    return dataclasses.replace(
        ticket, id=part_id(ticket.id, Part.OVERLOAD, attempt), avoid="", slack_s=-ticket.tier_offset_s,
        age_s=age_s, timeout_s=timeout_s,
    )


def continuation_order(ticket: Ticket, age_s: float, request_id: str | None = None) -> Ticket:
    """Where does a paused request's next part go? First in line for the next free slot
    of its tier: its original arrival (``age_s`` ago) and no slack (it gave its own slot
    to more urgent work); one more pause; no second fair-share charge (cost 0). Its id is
    the request's with ``-p<pauses>`` (the request's id: ``request_id``, or else read
    from the ticket's by :func:`request_of`), whatever part it paused."""
    pauses = ticket.pauses + 1
    base = request_id if request_id is not None else request_of(ticket.id)
    return dataclasses.replace(
        ticket, id=part_id(base, Part.PAUSE, pauses), pauses=pauses, age_s=age_s, slack_s=0.0, cost_s=0.0
    )
