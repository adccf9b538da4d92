"""Which backend gets a ticket? The dispatch script's backend-pick rule, as a pure function.

The rule runs inside ``lua/_dispatch.lua`` (``pick_backend``), atomically with the
grant; this is its Python twin, to read, to table-test and to reason with. A test
holds the two equal on random pool states (``tests/scheduler/policy/test_routing.py``).

Among the backends that serve the ticket's model, that its owner replica registered
(it can call them), are up, have a free slot and are not the one it must avoid, pick the one that would finish its outstanding work
soonest: ``(work + predicted) / rate``, where work is the predicted tokens of the
leases it holds and rate is its measured decode speed times its routing weight;
ties go to the backend with fewer requests in flight. Restricted work (long class,
batch tier) may use a backend only below its long cap — or borrow a reserved slot,
up to ``borrow`` beyond the cap, while no open work waits and none is expected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlotState:
    """One backend with at least one free slot, as the dispatch sees it."""

    busy: int  # leases held now
    work: float  # predicted output tokens of those leases
    rate: float  # decode tokens/s (1 while unknown) times routing weight
    lcap: int  # slots restricted work may hold
    lbusy: int  # slots restricted work holds now
    borrow: int = 0  # reserved slots restricted work may borrow while open work is quiet


@dataclass(frozen=True, slots=True)
class Pick:
    backend: str | None  # None: no backend may take it now
    borrowed: bool = False  # the slot is borrowed from the short-work reserve


def pick_backend(
    serving: Iterable[str], states: Mapping[str, SlotState], predicted: float, restricted: bool = False,
    avoid: str = "", open_waiting: int = 0, quiet: bool = False,
) -> Pick:
    """Which backend with a free slot should take this ticket, and is the slot borrowed?

    ``serving``: the backends that serve its model and its owner registered; ``states``:
    those with a free slot.
    Among equals (same load, same busy count) the first in ``serving`` order wins.
    """
    best: tuple[float, int] | None = None
    pick = Pick(None)
    for name in serving:
        s = states.get(name)
        if s is None or name == avoid:
            continue
        borrowed = False
        if restricted and s.lbusy >= s.lcap:
            if not (open_waiting <= 0 and quiet and s.lbusy < s.lcap + s.borrow):
                continue
            borrowed = True
        rank = ((s.work + predicted) / s.rate, s.busy)
        if best is None or rank < best:
            best, pick = rank, Pick(name, borrowed)
    return pick
