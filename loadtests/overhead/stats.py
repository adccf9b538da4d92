"""Percentile summaries, computed where the samples are so only a few numbers travel."""

from __future__ import annotations

import math
from collections.abc import Sequence

QUANTILES = (50.0, 90.0, 99.0)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, linearly interpolated."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize_ns(values_ns: Sequence[int]) -> dict[str, float]:
    """p50 / p90 / p99 / mean / max of nanosecond samples, in milliseconds."""
    ordered = sorted(values_ns)
    out = {f"p{int(q)}": percentile(ordered, q) / 1e6 for q in QUANTILES}
    out["mean"] = (sum(ordered) / len(ordered) / 1e6) if ordered else math.nan
    out["max"] = (ordered[-1] / 1e6) if ordered else math.nan
    out["n"] = float(len(ordered))
    return out
