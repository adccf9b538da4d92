"""Which running generation gives its slot to an urgent request? The dispatch script's
pause rule, as a pure function.

Engines run what they admitted to completion, so when long generations hold every slot
a short request that arrives waits for one to finish, whatever its rank. With
preemption on, the dispatch script (``lua/_dispatch.lua``, ``pick_victim``) may pause
one of them instead, atomically with the grant: the gateway that owns it closes its
upstream stream (the engine frees its KV cache), keeps the client's stream open, and
queues a continuation that keeps the original arrival time. This is its Python twin,
table-tested and held equal to the Lua (``tests/scheduler/policy/test_preemption.py``).

The rule, for a ticket that found no free slot on any backend serving its model:

- it may pause only leases on backends that serve its model, its owner registered, are
  up, are not the one it avoids, and can resume (``resume`` is set for the backend);
- only leases whose owner reported them preemptible (streamed, ``n`` = 1, no tool call
  so far) and that have produced more than ``quantum_tokens`` output tokens, paused
  fewer than ``max_pauses`` times;
- only a lease it may overtake. Of another tier: only if it is more urgent in queue
  order (a lower score; tier offsets are in the scores), so a worse tier never pauses a
  better one. Of its own tier: only if it arrived at most ``max_slack`` after the lease's
  request (the starvation bound, counted from that request's original arrival);
- only for fresh work of the short or medium class: a fresh request has attained no
  service, the lease more than a quantum (least attained service first, which needs no
  prediction to be right: a reply predicted medium that turns out short is not left
  behind); never for a continuation (a paused request queued again waits for a free
  slot, and its original arrival puts it first in line), nor for the long class;
- of those, the one that has run longest: least attained service goes first, as in
  multi-level feedback queues, so a misprediction costs a bounded amount.

The gateway's side (:func:`candidate_after`, :func:`is_candidate`): a generation it
relays reports itself a candidate at once, not at its next heartbeat, when it has
produced more than ``quantum_tokens`` output tokens since it (re)started; a part that
has just resumed has paid its re-read of the prompt, so it is not the next victim.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Running:
    """A lease its owner reported as preemptible."""

    lease: str
    backend: str
    attained: int  # output tokens so far
    pauses: int  # times its request was paused before
    score: float  # its ticket's queue score
    tier: str
    arrival: float = 0.0  # its request's original arrival


@dataclass(frozen=True, slots=True)
class Urgent:
    """The ticket that found no free slot."""

    cls: str
    tier: str
    score: float
    arrival: float = 0.0
    predicted: int = 0  # its predicted output tokens
    pauses: int = 0  # >0: a paused request's continuation


def may_overtake(urgent: Urgent, r: Running, max_slack_s: float) -> bool:
    """May ``urgent`` take the slot of running lease ``r``?"""
    if urgent.pauses > 0 or urgent.cls == "long":
        return False
    if r.tier != urgent.tier:
        return urgent.score < r.score
    return urgent.arrival <= r.arrival + max_slack_s


def pick_victim(
    urgent: Urgent, running: Iterable[Running], eligible: set[str], quantum_tokens: int, max_pauses: int,
    max_slack_s: float = 30.0,
) -> Running | None:
    """Which running lease should give its slot to ``urgent``? None: none may.

    ``eligible``: the backends that serve its model, are up, can resume, and are not
    the one it avoids. Among equals (same attained tokens) any one may be chosen.
    """
    best: Running | None = None
    for r in running:
        if r.attained <= quantum_tokens or r.pauses >= max_pauses or r.backend not in eligible:
            continue
        if not may_overtake(urgent, r, max_slack_s):
            continue
        if best is None or r.attained > best.attained:
            best = r
    return best


def candidate_after(tokens_at_start: int, quantum_tokens: int) -> int:
    """Past how many output tokens (counted over the whole request) does a generation
    become a pause candidate? ``quantum_tokens`` more than it had when it (re)started."""
    return tokens_at_start + quantum_tokens


def is_candidate(tokens: int, tokens_at_start: int, quantum_tokens: int) -> bool:
    """Has a generation that (re)started at ``tokens_at_start`` output tokens run long
    enough to be paused, now at ``tokens``? Only past its quantum: strictly more than
    ``quantum_tokens`` tokens since it (re)started."""
    return tokens > candidate_after(tokens_at_start, quantum_tokens)
