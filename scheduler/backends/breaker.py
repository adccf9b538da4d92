"""Is a backend fit for traffic? A circuit breaker, fed by probes and real requests.

    PROBING ──first good probe──► UP ──fail_threshold failures in a row──► DOWN
       ▲  │                        ▲                                      │
       │  └──any failure──► DOWN   └──recover_successes good answers──┐   │
       └─────────────────────── a good answer ◄───────────────────────┴───┘

A backend starts PROBING (unknown); at start-up one good probe is enough for UP.
Later, ``fail_threshold`` failures in a row (probes or real requests: connect errors,
5xx, broken streams) open the breaker: DOWN takes the backend out. A good answer then
half-opens it: PROBING brings it back with a trickle of one slot, any failure there
opens it again, and ``recover_successes`` good answers in a row close it (UP).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Health(enum.StrEnum):
    UP = "up"
    DOWN = "down"  # circuit open
    PROBING = "probing"  # half-open: a trickle of traffic


@dataclass(slots=True)
class Breaker:
    fail_threshold: int = 3
    recover_successes: int = 3
    health: Health = Health.PROBING
    failures: int = 0  # consecutive
    successes: int = 0  # consecutive, while probing
    probed: bool = False  # seen at least one answer

    def observe(self, ok: bool) -> Health:
        """One answer, good or bad; the health that follows."""
        first = not self.probed
        self.probed = True
        if ok and first:
            self.health = Health.UP  # at start-up a good answer is enough
            return self.health
        if not ok:
            self.failures += 1
            self.successes = 0
            if self.health is not Health.DOWN and self.failures >= self.fail_threshold:
                self.health = Health.DOWN
            elif self.health is Health.PROBING:
                self.health = Health.DOWN
            return self.health
        self.failures = 0
        if self.health is Health.DOWN:
            self.health, self.successes = Health.PROBING, 0
        elif self.health is Health.PROBING:
            self.successes += 1
            if self.successes >= self.recover_successes:
                self.health = Health.UP
        return self.health
