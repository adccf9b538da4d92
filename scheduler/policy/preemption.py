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

- it may pause only leases on backends that serve its model, are up, are not the one
  it avoids, and can resume (``resume`` is set for the backend);
- only leases whose owner reported them preemptible (streamed, ``n`` = 1, no tool call
  so far) and that have produced more than ``quantum_tokens`` output tokens, paused
  fewer than ``max_pauses`` times;
- only a lease it is more urgent than in queue order (a lower score): since scores are
  ``arrival + min(max_slack, slack) + tier offset``, no lease is paused for a request
  that arrived more than ``max_slack`` after it (the starvation bound still holds, from
  the original arrival), and a worse tier never pauses a better one;
- and only if it is short, or of another tier than the lease (then, by the score, a
  more urgent one);
- of those, the one that has run longest: least attained service goes first, as in
  multi-level feedback queues, so a misprediction costs a bounded amount.
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


@dataclass(frozen=True, slots=True)
class Urgent:
    """The ticket that found no free slot."""

    cls: str
    tier: str
    score: float


def pick_victim(
    urgent: Urgent, running: Iterable[Running], eligible: set[str], quantum_tokens: int, max_pauses: int
) -> Running | None:
    """Which running lease should give its slot to ``urgent``? None: none may.

    ``eligible``: the backends that serve its model, are up, can resume, and are not
    the one it avoids. Among equals (same attained tokens) any one may be chosen.
    """
    best: Running | None = None
    for r in running:
        if r.attained <= quantum_tokens or r.pauses >= max_pauses or r.backend not in eligible:
            continue
        if r.score <= urgent.score or not (urgent.cls == "short" or r.tier != urgent.tier):
            continue
        if best is None or r.attained > best.attained:
            best = r
    return best
