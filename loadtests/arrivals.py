"""When requests are sent: seeded arrival processes, as offsets in seconds from the start.

Open loop (the send time does not depend on the server): Poisson at a rate, gamma
with a burstiness factor (the coefficient of variation of inter-arrival gaps; 1 is
Poisson, above 1 is burstier), a linear ramp of the rate, and trace replay. Closed
loop (``concurrency``): a fixed number of clients, each sending its next request when
the last one ends; that one has no schedule, so ``open_loop_times`` refuses it.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass


class Process(enum.StrEnum):
    POISSON = "poisson"
    GAMMA = "gamma"
    RAMP = "ramp"
    TRACE = "trace"
    CONCURRENCY = "concurrency"


@dataclass(frozen=True, slots=True)
class ArrivalSpec:
    process: Process = Process.POISSON
    rate: float = 1.0  # requests per second (poisson, gamma); the ramp's end rate
    cv: float = 1.0  # gamma: coefficient of variation of the gaps
    ramp_from: float = 0.0  # ramp: the start rate
    ramp_s: float = 60.0  # ramp: seconds from ramp_from to rate; the rate holds after
    concurrency: int = 1  # closed loop: clients in parallel

    def __post_init__(self) -> None:
        if self.process in (Process.POISSON, Process.GAMMA, Process.RAMP) and self.rate <= 0:
            raise ValueError("rate must be > 0")
        if self.cv <= 0:
            raise ValueError("cv must be > 0")
        if self.ramp_from < 0 or self.ramp_s <= 0:
            raise ValueError("ramp_from must be >= 0 and ramp_s > 0")
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")

    @property
    def closed_loop(self) -> bool:
        return self.process is Process.CONCURRENCY


def poisson_times(rate: float, rng: random.Random) -> Iterator[float]:
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        yield t


def gamma_times(rate: float, cv: float, rng: random.Random) -> Iterator[float]:
    """Gamma-distributed gaps with mean ``1/rate`` and coefficient of variation ``cv``."""
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate * shape)
    t = 0.0
    while True:
        t += rng.gammavariate(shape, scale)
        yield t


def ramp_times(start_rate: float, end_rate: float, ramp_s: float, rng: random.Random) -> Iterator[float]:
    """A Poisson process whose rate goes linearly from ``start_rate`` to ``end_rate`` over ``ramp_s``.

    Unit-rate arrivals in "expected count" space, mapped back through the inverse of the
    cumulative rate ``L(t) = a t + (b - a) t^2 / (2 T)`` (then ``b`` per second after ``T``).
    """
    a, b, T = start_rate, end_rate, ramp_s
    area = (a + b) * T / 2.0
    s = 0.0
    while True:
        s += rng.expovariate(1.0)
        if s >= area:
            yield T + (s - area) / b
        elif a == b:
            yield s / a
        else:
            k = (b - a) / (2.0 * T)  # k t^2 + a t - s = 0
            yield (-a + math.sqrt(a * a + 4.0 * k * s)) / (2.0 * k)


def open_loop_times(spec: ArrivalSpec, rng: random.Random) -> Iterator[float]:
    """Send offsets of an open-loop process (traces are replayed from their rows instead)."""
    if spec.process is Process.POISSON:
        return poisson_times(spec.rate, rng)
    if spec.process is Process.GAMMA:
        return gamma_times(spec.rate, spec.cv, rng)
    if spec.process is Process.RAMP:
        return ramp_times(spec.ramp_from, spec.rate, spec.ramp_s, rng)
    raise ValueError(f"{spec.process} has no generated schedule")
