"""Slots kept for short work: how many of a backend's slots may long work hold?

Engines do not preempt a running request for a more urgent one, so ordering the
queue is not enough: when long generations hold every running slot, the next short
request waits for one of them to finish. Reservation caps *restricted* work (the
long class and the batch tier) at a share of each backend's current limit, enforced
in the dispatch script with the limit itself, so it holds across replicas.

- **Adaptive share**: the cap leaves room for the open (short) class's recent demand
  for slots — its mean number of requests in service, spread over the pool's
  backends — plus ``headroom_slots``, with the long share kept between
  ``min_long_share`` and ``max_long_share``.
- **Work-conserving**: while no open request waits and none arrived for
  ``quiet_after_s``, restricted work may borrow up to ``borrow_share`` of the limit
  beyond its cap. At worst a short request that arrives then waits for the first
  running request to finish, as it would without reservation; borrowed slots are not
  lent again while open work is expected, so the reserve refills as they end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReservationParams:
    enabled: bool = False
    min_long_share: float = 0.5  # restricted work always may use at least this share
    max_long_share: float = 0.9
    headroom_slots: float = 1.0  # slots kept beyond the open class's measured demand
    borrow_share: float = 0.5  # of the limit, borrowable while open work is quiet
    quiet_after_s: float = 10.0
    window_s: float = 30.0  # how far back demand is measured


class Reservation:
    """One per pool: the open class's demand, and the long cap it leaves per backend."""

    def __init__(self, params: ReservationParams, backends: int = 1) -> None:
        self.params = params
        self.backends = max(1, backends)
        self.demand_slots = 0.0  # mean open-class requests in service, whole pool
        self._busy_s = 0.0  # open-class service seconds in the current window
        self._window = 0.0
        self._since_open = math.inf

    def on_open_arrival(self) -> None:
        self._since_open = 0.0

    def on_open_done(self, service_s: float) -> None:
        self._busy_s += max(0.0, service_s)

    @property
    def quiet(self) -> bool:
        return self._since_open >= self.params.quiet_after_s

    def tick(self, dt: float) -> None:
        """Every probe round: update the measured demand (a decaying window)."""
        self._since_open += dt
        self._window += dt
        if self._window > 0:
            self.demand_slots = self._busy_s / max(self._window, dt)
        if self._window >= self.params.window_s:
            self._busy_s /= 2  # forget slowly: half the weight per window
            self._window /= 2

    def share(self, limit: int) -> float:
        p = self.params
        keep = self.demand_slots / self.backends + p.headroom_slots
        return max(p.min_long_share, min(p.max_long_share, 1.0 - keep / max(1, limit)))

    def long_cap(self, limit: int) -> int:
        if not self.params.enabled:
            return limit
        return max(1, min(limit, math.floor(self.share(limit) * limit)))

    def borrow(self, limit: int) -> int:
        if not self.params.enabled:
            return 0
        return max(0, min(limit - self.long_cap(limit), math.floor(self.params.borrow_share * limit)))
