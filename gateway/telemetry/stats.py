"""The last minute per request class, kept in memory by each replica for ``/admin/stats``.

Prometheus holds the long history; this is the quick look a person (or the
dashboard) takes at one replica without a metrics stack. Counts go into one-second
slots of a ring, so rates cost nothing to keep; latencies are kept as samples (a
bounded deque per class) and their percentiles are computed on request, exactly, by
nearest rank — the same definition the load-test reports use.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class _Slot:
    second: int = -1
    requests: int = 0  # completed successfully
    errors: int = 0  # failed after admission (backend errors, broken streams)
    rejections: int = 0  # refused or evicted by the scheduler
    output_tokens: int = 0
    pauses: int = 0  # of the requests completed: how often they were paused


@dataclass(slots=True)
class _Sample:
    at: float
    ttft_s: float | None
    tpot_s: float | None
    queue_s: float | None


@dataclass(slots=True)
class _Class:
    slots: list[_Slot]
    samples: deque[_Sample] = field(default_factory=lambda: deque(maxlen=4096))


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of unsorted values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(w: dict[str, Any], window_s: int) -> dict[str, float | int | None]:
    """One class's window (``WindowStats.window``, or several summed) as the dashboard reads it."""
    requests, tokens = w["requests"], w["output_tokens"]
    ttft, tpot, waits = w["ttft"], w["tpot"], w["queue"]
    return {
        "requests": requests,
        "errors": w["errors"],
        "rejections": w["rejections"],
        "output_tokens": tokens,
        "rps": requests / window_s,
        "output_tps": tokens / window_s,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p90_s": percentile(ttft, 90),
        "ttft_p99_s": percentile(ttft, 99),
        "tpot_p50_s": percentile(tpot, 50),
        "tpot_p99_s": percentile(tpot, 99),
        "queue_wait_p99_s": percentile(waits, 99),
        "pauses_per_request": w["pauses"] / requests if requests else 0.0,
        "samples": w["samples"],
    }


class WindowStats:
    """Per class: requests, tokens and rejections per second; latency samples."""

    def __init__(
        self, window_s: int = 60, classes: Iterable[str] = (), clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self._clock = clock
        self._classes: dict[str, _Class] = {}
        for cls in classes:  # listed even before their first request
            self._slot(cls, clock())

    def _slot(self, cls: str, now: float) -> _Slot:
        entry = self._classes.get(cls)
        if entry is None:
            entry = self._classes[cls] = _Class([_Slot() for _ in range(self.window_s)])
        second = int(now)
        slot = entry.slots[second % self.window_s]
        if slot.second != second:
            slot.second, slot.requests, slot.errors, slot.rejections, slot.output_tokens = second, 0, 0, 0, 0
            slot.pauses = 0
        return slot

    def completed(
        self, cls: str, ok: bool, output_tokens: int | None, ttft_s: float | None, tpot_s: float | None,
        queue_s: float | None, pauses: int = 0,
    ) -> None:
        now = self._clock()
        slot = self._slot(cls, now)
        if not ok:
            slot.errors += 1
            return
        slot.requests += 1
        slot.output_tokens += output_tokens or 0
        slot.pauses += pauses
        self._classes[cls].samples.append(_Sample(now, ttft_s, tpot_s, queue_s))

    def rejected(self, cls: str) -> None:
        self._slot(cls, self._clock()).rejections += 1

    def window(self) -> dict[str, dict[str, Any]]:
        """Per class over the window: the counts and the latency samples themselves, which
        add up across replicas (``cluster.py`` sums them; percentiles do not add)."""
        now = self._clock()
        oldest = int(now) - self.window_s + 1  # samples and counts: the same whole seconds
        out: dict[str, dict[str, Any]] = {}
        for cls, entry in sorted(self._classes.items()):
            live = [s for s in entry.slots if s.second >= oldest]
            samples = [s for s in entry.samples if s.at >= oldest]
            out[cls] = {
                "requests": sum(s.requests for s in live),
                "errors": sum(s.errors for s in live),
                "rejections": sum(s.rejections for s in live),
                "output_tokens": sum(s.output_tokens for s in live),
                "pauses": sum(s.pauses for s in live),
                "ttft": [s.ttft_s for s in samples if s.ttft_s is not None],
                "tpot": [s.tpot_s for s in samples if s.tpot_s is not None],
                "queue": [s.queue_s for s in samples if s.queue_s is not None],
                "samples": len(samples),
            }
        return out

    def snapshot(self) -> dict[str, dict[str, float | int | None]]:
        """``{class: {rps, output_tps, ttft_p50_s, ..., rejections}}`` over the window."""
        return {cls: summarize(w, self.window_s) for cls, w in self.window().items()}

    def timeline(self) -> list[dict[str, int]]:
        """Per second of the window, oldest first: requests and output tokens, all classes."""
        now = int(self._clock())
        totals = {second: [0, 0] for second in range(now - self.window_s + 1, now + 1)}
        for entry in self._classes.values():
            for slot in entry.slots:
                if slot.second in totals:
                    totals[slot.second][0] += slot.requests
                    totals[slot.second][1] += slot.output_tokens
        return [
            {"ago_s": now - second, "requests": r, "output_tokens": t} for second, (r, t) in sorted(totals.items())
        ]
