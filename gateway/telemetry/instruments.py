"""Counters, histograms and observed gauges, cheap enough for the request path.

Why not the OpenTelemetry SDK's instruments: each measurement there validates and
hashes its attribute dict, about 30 µs in CPython; a request records nine, which
alone would be a third of a millisecond of gateway overhead. These take label
*values* as a tuple in the order declared once per instrument (a dict lookup and an
add, about 1 µs) and keep cumulative state. Both exports read that state when
they collect: ``prometheus.py`` renders text, ``otlp.py`` builds OTLP data
for the standard exporter. Everything runs on the event loop's thread: recording,
scrapes, and the OTLP snapshot alike, so no lock is needed.

Each instrument holds at most ``MAX_SERIES`` label combinations; more land in one
series whose values are all ``overflow`` (as the OpenTelemetry SDK does).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

MAX_SERIES = 2000
Key = tuple[str, ...]
T = TypeVar("T", bound="Instrument")


@dataclass(slots=True)
class HistogramState:
    counts: list[int]  # per bucket, not cumulative; the last is (bounds[-1], +Inf)
    count: int = 0
    sum: float = 0.0
    min: float = float("inf")
    max: float = float("-inf")


@dataclass(slots=True)
class Instrument:
    name: str  # OpenTelemetry name, e.g. gen_ai.server.time_to_first_token
    unit: str  # UCUM, e.g. s, {token}, 1
    description: str
    labels: tuple[str, ...]  # attribute keys, in the order values are given

    def _key(self, series: dict[Key, object], key: Key) -> Key:
        if key in series or len(series) < MAX_SERIES:
            return key
        return ("overflow",) * len(self.labels)


@dataclass(slots=True)
class Counter(Instrument):
    series: dict[Key, float] = field(default_factory=dict)

    def add(self, value: float, key: Key = ()) -> None:
        key = self._key(self.series, key)  # type: ignore[arg-type]
        self.series[key] = self.series.get(key, 0) + value


@dataclass(slots=True)
class Histogram(Instrument):
    bounds: tuple[float, ...] = ()  # upper bounds, inclusive, ascending
    series: dict[Key, HistogramState] = field(default_factory=dict)

    def record(self, value: float, key: Key = ()) -> None:
        state = self.series.get(key)
        if state is None:
            key = self._key(self.series, key)  # type: ignore[arg-type]
            state = self.series.setdefault(key, HistogramState([0] * (len(self.bounds) + 1)))
        state.counts[bisect_left(self.bounds, value)] += 1
        state.count += 1
        state.sum += value
        if value < state.min:
            state.min = value
        if value > state.max:
            state.max = value


@dataclass(slots=True)
class Gauge(Instrument):
    """Observed when collected: ``observe`` yields (label values, value) pairs."""

    observe: Callable[[], Iterable[tuple[Key, float]]] = lambda: ()


class Registry:
    """The instruments of one gateway, in the order they were defined."""

    def __init__(self) -> None:
        self.instruments: list[Instrument] = []
        self.start_ns = time.time_ns()  # the start of every cumulative series

    def _add(self, instrument: T) -> T:
        if any(i.name == instrument.name for i in self.instruments):
            raise ValueError(f"metric {instrument.name} is defined twice")
        self.instruments.append(instrument)
        return instrument

    def counter(self, name: str, unit: str, description: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, unit, description, tuple(labels)))

    def histogram(
        self, name: str, unit: str, description: str, labels: Sequence[str], bounds: Sequence[float]
    ) -> Histogram:
        return self._add(Histogram(name, unit, description, tuple(labels), tuple(float(b) for b in bounds)))

    def gauge(
        self, name: str, unit: str, description: str, labels: Sequence[str],
        observe: Callable[[], Iterable[tuple[Key, float]]],
    ) -> Gauge:
        return self._add(Gauge(name, unit, description, tuple(labels), observe))
