"""Arrival generators: seeded determinism and rates within statistical tolerance (from counts)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from loadtests.arrivals import ArrivalSpec, Process, gamma_times, open_loop_times, poisson_times, ramp_times


def count_until(times, horizon: float) -> int:
    return sum(1 for _ in itertools.takewhile(lambda t: t <= horizon, times))


def test_same_seed_same_schedule() -> None:
    for spec in (ArrivalSpec(Process.POISSON, rate=3), ArrivalSpec(Process.GAMMA, rate=3, cv=3),
                 ArrivalSpec(Process.RAMP, rate=5, ramp_from=1, ramp_s=10)):
        a = list(itertools.islice(open_loop_times(spec, random.Random(7)), 50))
        b = list(itertools.islice(open_loop_times(spec, random.Random(7)), 50))
        c = list(itertools.islice(open_loop_times(spec, random.Random(8)), 50))
        assert a == b != c
        assert a == sorted(a)


def test_poisson_rate_within_tolerance() -> None:
    rate, horizon = 5.0, 2000.0
    n = count_until(poisson_times(rate, random.Random(1)), horizon)
    expected = rate * horizon
    assert abs(n - expected) < 5 * math.sqrt(expected)


def test_gamma_mean_rate_and_burstiness() -> None:
    rate, cv = 4.0, 3.0
    times = list(itertools.islice(gamma_times(rate, cv, random.Random(2)), 20000))
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    assert mean == pytest.approx(1 / rate, rel=0.1)
    assert sd / mean == pytest.approx(cv, rel=0.15)


def test_ramp_count_matches_area_under_rate() -> None:
    start, end, ramp = 1.0, 9.0, 500.0
    n = count_until(ramp_times(start, end, ramp, random.Random(3)), ramp)
    expected = (start + end) / 2 * ramp
    assert abs(n - expected) < 5 * math.sqrt(expected)
    # first half of the ramp has a lower mean rate than the second
    times = list(itertools.takewhile(lambda t: t <= ramp, ramp_times(start, end, ramp, random.Random(3))))
    first = sum(1 for t in times if t <= ramp / 2)
    assert first < len(times) - first


def test_ramp_holds_end_rate_after_the_ramp() -> None:
    times = list(itertools.islice(ramp_times(2.0, 2.0, 10.0, random.Random(4)), 5000))
    assert count_until(iter(times), 2000.0) == pytest.approx(4000, abs=5 * math.sqrt(4000))


def test_spec_validation() -> None:
    with pytest.raises(ValueError):
        ArrivalSpec(Process.POISSON, rate=0)
    with pytest.raises(ValueError):
        ArrivalSpec(Process.CONCURRENCY, concurrency=0)
    with pytest.raises(ValueError):
        open_loop_times(ArrivalSpec(Process.CONCURRENCY), random.Random(0))
