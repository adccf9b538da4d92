"""Load over time, derived from the client's records alone (nothing is polled).

In flight: requests sent and not yet ended, averaged over each bin. Throughput: completed
requests per second by end time, and output tokens per second with each request's tokens
spread evenly from its first token to its end (so a long generation is not one spike).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from loadtests.client import RequestRecord


@dataclass(frozen=True, slots=True)
class TimeSeries:
    bin_s: float
    t_s: list[float]  # start of each bin, seconds after the run's start
    in_flight: list[float]
    rps: list[float]  # successful completions per second
    output_tps: list[float]


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def timeseries(records: Sequence[RequestRecord], bin_s: float | None = None) -> TimeSeries:
    ended = [r for r in records if r.end_s is not None]
    if not ended:
        return TimeSeries(bin_s or 1.0, [], [], [], [])
    horizon = max(r.end_s for r in ended if r.end_s is not None)
    if bin_s is None:  # about 100 bins, at least 0.25 s each
        bin_s = max(0.25, round(horizon / 100, 2))
    n = max(1, math.ceil(horizon / bin_s))
    busy = [0.0] * n
    done = [0.0] * n
    tokens = [0.0] * n
    for r in ended:
        start, end = r.start_s, r.end_s
        assert end is not None
        for b in range(int(start // bin_s), min(n, int(end // bin_s) + 1)):
            busy[b] += _overlap(start, end, b * bin_s, (b + 1) * bin_s)
        if not r.ok:
            continue
        done[min(n - 1, int(end // bin_s))] += 1
        first = start + (r.ttft_s or 0.0)
        span = end - first
        if span <= 0:
            tokens[min(n - 1, int(end // bin_s))] += r.output_tokens
            continue
        for b in range(int(first // bin_s), min(n, int(end // bin_s) + 1)):
            tokens[b] += r.output_tokens * _overlap(first, end, b * bin_s, (b + 1) * bin_s) / span
    return TimeSeries(
        bin_s,
        [round(b * bin_s, 3) for b in range(n)],
        [round(x / bin_s, 3) for x in busy],
        [round(x / bin_s, 3) for x in done],
        [round(x / bin_s, 1) for x in tokens],
    )
