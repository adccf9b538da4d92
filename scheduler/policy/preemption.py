"""Which running generation gives its slot to an urgent request, and does the pause pay?
The dispatch script's pause rule, as a pure function.

Engines run what they admitted to completion, so when long generations hold every slot
a short request that arrives waits for one to finish, whatever its rank. With
preemption on, the dispatch script (``lua/_dispatch.lua``, ``pick_victim``) may pause
one of them instead, atomically with the grant: the gateway that owns it closes its
upstream stream (the engine frees its KV cache), keeps the client's stream open, and
queues a continuation that keeps the original arrival time. This is its Python twin,
table-tested and held equal to the Lua (``tests/scheduler/policy/test_preemption.py``).

A pause is not free: the continuation makes the engine read the prompt and the text so
far again, less what its prefix cache still holds. On a real engine that re-read can
exceed the headroom a pool has, and then pausing feeds itself (more backlog, more
pauses, more re-reads). So a pause is taken only where it pays, and never beyond a
budget. The rule, for a fresh ticket of the short or medium class that found no free
slot on any backend serving its model:

- **backlog** (0: off): the pool's queue holds at most ``backlog`` times the slots of
  the backends it could pause on: no spare capacity, no extra work. A blunt signal —
  under short-first ordering the queue also holds the long work that shorter work
  overtakes — and the costliest rule on the simulator (it refuses the pauses of busy
  moments, where they matter most), but on a real engine the rule that kept pausing from
  doing harm (``docs/benchmarks/engine-vllm.md``);
- **eligible**: only leases on backends that serve its model, its owner registered, are
  up, are not the one it avoids, and can resume; that their owner reported preemptible
  (streamed, ``n`` = 1, no tool call so far) past a quantum of their own progress,
  paused fewer than ``max_pauses`` times; that it may overtake (another tier: only a
  worse one; its own tier: only within the starvation bound ``max_slack`` of the
  lease's original arrival); never for a continuation nor for the long class;
- **worth it** (``short``; 0: off): the lease's expected remaining output is at least
  ``ratio`` times the urgent request's predicted output. Its remaining output is its prediction
  less what it made, and never below half of what it made (a reply that overran its
  prediction is expected to run on); so a reply the gateway classed short is paused
  only once it has shown it is not. It leans on predictions, and where they are weak
  (prompts only) it keeps most pauses from happening;
- **pays** (``cost``): the urgent request would otherwise wait until the first slot
  frees (the least expected remaining time of the leases on those backends); that
  wait must be at least the resume's cost — its re-read time (one prefill's overhead,
  and prompt plus output, less the prefix cache's expected hits, at the backend's
  prefill time per token) times the streams on that backend, which all wait for it;
- **budget**: the backend's re-read budget (a share ``budget`` of its time, refilled
  continuously, holding at most ``window`` seconds of it) covers the cost. This is what
  bounds the extra work pausing can add, whatever the load: at most ``budget`` of the
  backend's time, over any window, as the engine's own counters measure a re-read;
- of those left, the one that has run longest (least attained service goes first).

Every decision has a reason: the pause's (its wait and cost), or the furthest rule a
candidate reached (``none`` < ``short`` < ``cost`` < ``budget``; ``backlog`` before any).

The gateway's side (:func:`candidate_after`, :func:`is_candidate`): a generation it
relays reports itself a candidate at once, not at its next heartbeat, when it has
produced more than ``quantum_tokens`` output tokens since it (re)started; a part that
has just resumed has paid its re-read of the prompt, so it is not the next victim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler.types import ResumeCost

# why a ticket paused nothing, in the order its candidates get through the rule
REFUSALS = ("none", "short", "cost", "budget")
BACKLOG = "backlog"


@dataclass(frozen=True, slots=True)
class Running:
    """A lease on a backend the urgent ticket could pause on."""

    lease: str
    backend: str
    attained: int  # output tokens so far; -1: not reported (not preemptible now)
    pauses: int  # times its request was paused before
    score: float  # its ticket's queue score
    tier: str
    arrival: float = 0.0  # its request's original arrival
    predicted: int = 0  # its predicted output tokens
    prompt: int = 0  # its prompt's tokens (as its owner estimated them)


@dataclass(frozen=True, slots=True)
class Urgent:
    """The ticket that found no free slot."""

    cls: str
    tier: str
    score: float
    arrival: float = 0.0
    predicted: int = 0  # its predicted output tokens
    pauses: int = 0  # >0: a paused request's continuation


@dataclass(frozen=True, slots=True)
class Slots:
    """A backend the urgent ticket could pause on, as the script sees it."""

    busy: int
    limit: int
    cost: ResumeCost = ResumeCost()
    budget_s: float = math.inf  # re-read seconds its budget holds now


@dataclass(frozen=True, slots=True)
class PauseRule:
    quantum_tokens: int = 64
    max_pauses: int = 2
    max_slack_s: float = 30.0
    ratio: float = 2.0  # the victim's expected remaining output over the urgent one's (0: off)
    backlog: float = 1.0  # queued tickets per slot past which nothing is paused (0: off)
    budget: float = 0.1  # share of a backend's time its re-reads may take
    window_s: float = 30.0  # the budget holds at most budget * window_s seconds


@dataclass(frozen=True, slots=True)
class Decision:
    victim: Running | None
    reason: str  # a refusal (REFUSALS, BACKLOG) or, for a pause, "pause"
    wait_s: float = 0.0
    cost_s: float = 0.0


def may_overtake(urgent: Urgent, r: Running, max_slack_s: float) -> bool:
    """May ``urgent`` take the slot of running lease ``r``?"""
    if urgent.pauses > 0 or urgent.cls == "long":
        return False
    if r.tier != urgent.tier:
        return urgent.score < r.score
    return urgent.arrival <= r.arrival + max_slack_s


def remaining(predicted: int, attained: int) -> float:
    """Expected output tokens still to come: the prediction less what was made, never
    below half of what was made (not reported: the prediction)."""
    made = max(0, attained)
    return max(predicted - made, made / 2, 0.0)


def resume_cost_s(r: Running, cost: ResumeCost) -> float:
    """Seconds of prefill a continuation of ``r`` costs its backend: one prefill's
    overhead, and its tokens (prompt plus output so far, less the full cache blocks its
    prefix cache is expected to hold)."""
    tokens = r.prompt + max(0, r.attained)
    cached = cost.hit * cost.block * (tokens // cost.block) if cost.block > 0 else 0.0
    return cost.prefill_base_s + (tokens - cached) * cost.prefill_s


def budget_now(level: float | None, since: float, now: float, rule: PauseRule) -> float:
    """A backend's re-read budget at ``now`` (``level`` left at ``since``; None: never
    spent, full)."""
    cap = rule.budget * rule.window_s
    if level is None:
        return cap
    return min(cap, level + max(0.0, now - since) * rule.budget)


def decide(
    urgent: Urgent, running: Iterable[Running], pool: Mapping[str, Slots], queued: int, rule: PauseRule,
) -> Decision:
    """Which running lease should give its slot to ``urgent``, and why (or why none).

    ``pool``: the backends it may pause on (serve its model, up, can resume, not the
    one it avoids). ``running``: the leases on them. ``queued``: tickets in the pool's
    queue. Among equals (same attained tokens) any one may be chosen."""
    if not pool:
        return Decision(None, "none")
    if rule.backlog > 0 and queued > rule.backlog * sum(s.limit for s in pool.values()):
        return Decision(None, BACKLOG)
    leases = [r for r in running if r.backend in pool]
    if not leases:
        return Decision(None, "none")
    wait_s = min(remaining(r.predicted, r.attained) * pool[r.backend].cost.tpot_s for r in leases)
    best: Running | None = None
    best_cost, why = 0.0, 0
    for r in leases:
        if r.attained <= rule.quantum_tokens or r.pauses >= rule.max_pauses:
            continue
        if not may_overtake(urgent, r, rule.max_slack_s):
            continue
        if remaining(r.predicted, r.attained) < rule.ratio * urgent.predicted:
            why = max(why, 1)
            continue
        slots = pool[r.backend]
        cost_s = resume_cost_s(r, slots.cost)
        if wait_s < cost_s * max(1, slots.busy):
            why = max(why, 2)
            continue
        if slots.budget_s < cost_s:
            why = max(why, 3)
            continue
        if best is None or r.attained > best.attained:
            best, best_cost = r, cost_s
    if best is None:
        return Decision(None, REFUSALS[why])
    return Decision(best, "pause", wait_s, best_cost)


def candidate_after(tokens_at_start: int, quantum_tokens: int) -> int:
    """Past how many output tokens (counted over the whole request) does a generation
    become a pause candidate? ``quantum_tokens`` more than it had when it (re)started."""
    return tokens_at_start + quantum_tokens


def is_candidate(tokens: int, tokens_at_start: int, quantum_tokens: int) -> bool:
    """Has a generation that (re)started at ``tokens_at_start`` output tokens run long
    enough to be paused, now at ``tokens``? Only past its quantum: strictly more than
    ``quantum_tokens`` tokens since it (re)started."""
    return tokens > candidate_after(tokens_at_start, quantum_tokens)
