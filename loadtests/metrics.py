"""Turning request records into the numbers of docs/loadtests.md#metrics, per class and overall.

- Warm-up requests (the first N sent, or those sent in the first T seconds) are left out.
- Failed requests are counted by failure label and never averaged in; requests cut off
  when the run's time ran out are ``cancelled`` and counted apart from failures.
- The duration is from the first measured send to the last measured end, so RPS,
  output TPS, total TPS and goodput share one denominator.
- Percentiles interpolate linearly between order statistics (numpy's default).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from loadtests.client import RequestRecord
from loadtests.workload import Slo


@dataclass(frozen=True, slots=True)
class Warmup:
    requests: int = 0  # the first N requests sent
    seconds: float = 0.0  # requests sent in the first T seconds

    def measured(self, records: Iterable[RequestRecord]) -> list[RequestRecord]:
        ordered = sorted(records, key=lambda r: (r.start_s, r.index))
        return [r for r in ordered[self.requests:] if r.start_s >= self.seconds]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, linearly interpolated."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Dist:
    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Dist:
        v = sorted(values)
        if not v:
            return cls()
        return cls(len(v), sum(v) / len(v), percentile(v, 50), percentile(v, 90), percentile(v, 99))


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One class's numbers (or every class's, for ``overall``)."""

    count: int  # successful requests
    failed: int  # failed requests (not counting cancelled ones)
    cancelled: int  # still in flight when the run's time ran out
    errors: dict[str, int]  # failure label -> count (cancelled included)
    ttft_s: Dist
    tpot_s: Dist
    itl_s: Dist
    e2e_s: Dist
    rps: float
    output_tps: float
    total_tps: float
    goodput_rps: float | None  # None when the class has no SLO
    slo_attainment: float | None  # share of successful requests meeting every SLO
    input_tokens: int
    output_tokens: int
    served_classes: dict[str, int] = field(default_factory=dict)  # x-triage-class -> count


def measured_duration(records: Sequence[RequestRecord]) -> float:
    ends = [r.end_s for r in records if r.end_s is not None]
    if not records or not ends:
        return 0.0
    return max(ends) - min(r.start_s for r in records)


def summarize_group(records: Sequence[RequestRecord], duration_s: float,
                    slos: dict[str, Slo]) -> GroupSummary:
    ok = [r for r in records if r.ok]
    bad = [r for r in records if not r.ok]
    errors = Counter(r.error or "unknown" for r in bad)
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: 0.0)
    has_slo = any(_slo_set(slos.get(r.cls)) for r in records)
    good = sum(1 for r in ok if slos.get(r.cls, Slo()).met(r.ttft_s, r.tpot_s, r.e2e_s))
    out = sum(r.output_tokens for r in ok)
    inp = sum(r.input_tokens for r in ok)
    return GroupSummary(
        count=len(ok),
        failed=len(bad) - errors.get("cancelled", 0),
        cancelled=errors.get("cancelled", 0),
        errors=dict(sorted(errors.items())),
        ttft_s=Dist.of(r.ttft_s for r in ok if r.ttft_s is not None),
        tpot_s=Dist.of(t for r in ok if (t := r.tpot_s) is not None),
        itl_s=Dist.of(g for r in ok for g in r.itl_s),
        e2e_s=Dist.of(r.e2e_s for r in ok if r.e2e_s is not None),
        rps=per_s(len(ok)),
        output_tps=per_s(out),
        total_tps=per_s(out + inp),
        goodput_rps=per_s(good) if has_slo else None,
        slo_attainment=(good / len(ok) if ok else None) if has_slo else None,
        input_tokens=inp,
        output_tokens=out,
        served_classes=dict(sorted(Counter(r.served_class for r in ok if r.served_class).items())),
    )


def _slo_set(slo: Slo | None) -> bool:
    return slo is not None and any(v is not None for v in (slo.ttft_s, slo.tpot_s, slo.e2e_s))


@dataclass(frozen=True, slots=True)
class Summary:
    duration_s: float
    sent: int  # every request sent, warm-up included
    warmup_excluded: int
    overall: GroupSummary
    classes: dict[str, GroupSummary]


def summarize(records: Sequence[RequestRecord], slos: dict[str, Slo], warmup: Warmup = Warmup(),
              class_order: Sequence[str] = ()) -> Summary:
    measured = warmup.measured(records)
    duration = measured_duration(measured)
    names = list(class_order) + sorted({r.cls for r in measured} - set(class_order))
    classes = {}
    for name in names:
        group = [r for r in measured if r.cls == name]
        if group:
            classes[name] = summarize_group(group, duration, slos)
    return Summary(duration, len(records), len(records) - len(measured),
                   summarize_group(measured, duration, slos), classes)
