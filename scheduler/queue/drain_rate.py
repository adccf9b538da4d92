"""How fast a pool's queue drains: what a queued request's ``Retry-After`` and ETA are made of."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class DrainRate:
    """Grants per second from successive samples of the pool's grant counter (EWMA)."""

    rate: float = 0.0
    _last: tuple[float, int] | None = None

    def observe(self, now: float, granted: int) -> None:
        if self._last is not None and now > self._last[0] and granted >= self._last[1]:
            sample = (granted - self._last[1]) / (now - self._last[0])
            self.rate = sample if self.rate == 0 else 0.7 * self.rate + 0.3 * sample
        self._last = (now, granted)
