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
- **Never below what long work needs**: a cap under the restricted class's own offered
  load (its arrival rate times its mean service time) would let its queue grow without
  bound and leave the engine emptier than the traffic needs, which costs throughput.
  The cap is therefore at least that load divided by ``long_target_utilization``
  (still within ``max_long_share``); the reserve gets what is left.
- **Work-conserving**: while no open request waits and none arrived for
  ``quiet_after_s``, restricted work may borrow up to ``borrow_share`` of the limit
  beyond its cap. At worst a short request that arrives then waits for the first
  running request to finish, as it would without reservation; borrowed slots are not
  lent again while open work is expected, so the reserve refills as they end.

Each replica measures the traffic that reaches it; with several replicas behind a load
balancer that is about one in ``replicas`` of the pool's, so demand is scaled by the
number of live replicas (read from Redis every probe round).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReservationParams:
    enabled: bool = False
    min_long_share: float = 0.5  # restricted work always may use at least this share
    max_long_share: float = 0.75  # at least a quarter of each backend stays for short work
    headroom_slots: float = 1.0  # slots kept beyond the open class's measured demand
    borrow_share: float = 0.5  # of the limit, borrowable while open work is quiet
    quiet_after_s: float = 10.0
    window_s: float = 30.0  # how far back demand is measured
    long_target_utilization: float = 0.9  # of the capped slots, by the restricted class's load


class Reservation:
    """One per pool: the open class's demand, and the long cap it leaves per backend."""

    def __init__(self, params: ReservationParams, backends: int = 1) -> None:
        self.params = params
        self.backends = max(1, backends)
        self.replicas = 1  # live gateway replicas sharing the pool's traffic
        self.demand_slots = 0.0  # mean open-class requests in service, whole pool
        self.long_demand_slots = 0.0  # restricted work offered, in slots, whole pool
        self._busy_s = 0.0  # open-class service seconds in the current window
        self._long_arrivals = 0.0  # restricted arrivals in the current window
        self._long_service_s = 0.0  # service seconds of restricted requests finished...
        self._long_done = 0.0  # ...and how many they were
        self._window = 0.0
        self._since_open = math.inf

    def on_open_arrival(self) -> None:
        self._since_open = 0.0

    def on_open_done(self, service_s: float) -> None:
        self._busy_s += max(0.0, service_s)

    def on_restricted_arrival(self) -> None:
        self._long_arrivals += 1.0

    def on_restricted_done(self, service_s: float) -> None:
        self._long_service_s += max(0.0, service_s)
        self._long_done += 1.0

    @property
    def quiet(self) -> bool:
        return self._since_open >= self.params.quiet_after_s

    def tick(self, dt: float) -> None:
        """Every probe round: update the measured demand (a decaying window)."""
        self._since_open += dt
        self._window += dt
        if self._window > 0:
            span = max(self._window, dt)
            self.demand_slots = self._busy_s / span
            if self._long_done > 0:  # offered load: arrival rate x mean service time
                mean_service = self._long_service_s / self._long_done
                self.long_demand_slots = self._long_arrivals / span * mean_service
        if self._window >= self.params.window_s:
            # forget slowly: half the weight per window
            self._busy_s /= 2
            self._long_arrivals /= 2
            self._long_service_s /= 2
            self._long_done /= 2
            self._window /= 2

    def share(self, limit: int) -> float:
        p = self.params
        limit = max(1, limit)
        spread = self.replicas / self.backends  # this replica's view -> one backend's
        keep = self.demand_slots * spread + p.headroom_slots
        share = 1.0 - keep / limit
        need = self.long_demand_slots * spread / p.long_target_utilization
        if need > 0:
            share = max(share, math.ceil(need - 1e-9) / limit)
        return max(p.min_long_share, min(p.max_long_share, share))

    def long_cap(self, limit: int) -> int:
        if not self.params.enabled:
            return limit
        return max(1, min(limit, math.floor(self.share(limit) * limit)))

    def borrow(self, limit: int) -> int:
        if not self.params.enabled:
            return 0
        return max(0, min(limit - self.long_cap(limit), math.floor(self.params.borrow_share * limit)))
