"""What ``compare`` reports: one row per (mode, load), ratios against FIFO and the oracle.

Classes are by **true** output length: ``short`` <= the gateway's ``short_max_tokens``
(256), ``medium``, ``long`` > ``medium_max_tokens`` (1,024). A class's figures so
never depend on what the gateway predicted, nor on how a workload names its classes;
all three are always present (``count`` 0 when the run had none). The workload's own
classes are kept apart, in ``workload_classes``. Goodput judges each request by the
SLO of its workload class.

Row shape (``runs[]`` of the JSON, documented in ``docs/loadtests.md``)::

    {"mode", "load", "rate_rps", "workload",
     "classes": {"short" | "medium" | "long": Figures},
     "workload_classes": {workload class name: Figures},
     "overall": {"rps", "output_tps", "total_tps", "goodput_rps", "count", "failed", "cancelled"},
     "class_accuracy", "kendall_tau", "errors"}
    Figures = {"ttft_p50_s", "ttft_p99_s", "e2e_mean_s", "e2e_p99_s", "tpot_p50_s", "goodput_rps",
               "count", "failed", "cancelled", "queue_p50_ms", "queue_p99_ms"}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadtests.client import RequestRecord
from loadtests.metrics import GroupSummary, Summary, Warmup, percentile, summarize_group
from loadtests.workload import Slo
from scheduler.predictor.ranking import kendall_tau_b

CLASS_RANK = {"short": 0, "medium": 1, "long": 2}


def gateway_class(tokens: int, short_max: int, medium_max: int) -> str:
    return "short" if tokens <= short_max else "medium" if tokens <= medium_max else "long"


def true_class(record: RequestRecord, thresholds: tuple[int, int]) -> str:
    """The class of a request's true output length (what it was planned with)."""
    return gateway_class(record.planned_tokens, *thresholds)


def by_true_length(records: Sequence[RequestRecord], thresholds: tuple[int, int]
                   ) -> dict[str, list[RequestRecord]]:
    """``short``, ``medium`` and ``long`` (all three, in that order) -> their requests."""
    out: dict[str, list[RequestRecord]] = {name: [] for name in CLASS_RANK}
    for r in records:
        out[true_class(r, thresholds)].append(r)
    return out


def classification(records: Sequence[RequestRecord], short_max: int, medium_max: int
                   ) -> tuple[float | None, float | None]:
    """Share of requests whose ``x-triage-class`` matches the class of their true length, and tau-b."""
    seen = [r for r in records if r.ok and r.served_class in CLASS_RANK]
    if not seen:
        return None, None
    right = sum(1 for r in seen if r.served_class == gateway_class(r.planned_tokens, short_max, medium_max))
    tau = kendall_tau_b([r.planned_tokens for r in seen], [CLASS_RANK[r.served_class or ""] for r in seen])
    return right / len(seen), tau


def _queue(records: Sequence[RequestRecord], p: float) -> float | None:
    q = sorted(r.queue_ms for r in records if r.ok and r.queue_ms is not None)
    return percentile(q, p) if q else None


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def figures(g: GroupSummary, records: Sequence[RequestRecord]) -> dict[str, Any]:
    """One class's figures in a row, from its summary and its measured requests."""
    return {
        "ttft_p50_s": _r(g.ttft_s.p50), "ttft_p99_s": _r(g.ttft_s.p99),
        "e2e_mean_s": _r(g.e2e_s.mean), "e2e_p99_s": _r(g.e2e_s.p99), "tpot_p50_s": _r(g.tpot_s.p50, 5),
        "goodput_rps": _r(g.goodput_rps), "count": g.count, "failed": g.failed, "cancelled": g.cancelled,
        "queue_p50_ms": _r(_queue(records, 50), 1), "queue_p99_ms": _r(_queue(records, 99), 1),
    }


def run_row(mode: str, load: float, rate: float, workload: str, summary: Summary,
            records: Sequence[RequestRecord], warmup: Warmup, thresholds: tuple[int, int],
            slos: dict[str, Slo] | None = None) -> dict[str, Any]:
    measured = warmup.measured(records)
    classes = {name: figures(summarize_group(group, summary.duration_s, slos or {}), group)
               for name, group in by_true_length(measured, thresholds).items()}
    own = {name: figures(g, [r for r in measured if r.cls == name]) for name, g in summary.classes.items()}
    o = summary.overall
    accuracy, tau = classification(measured, *thresholds) if mode != "direct" else (None, None)
    return {
        "mode": mode, "load": load, "rate_rps": round(rate, 4), "workload": workload,
        "duration_s": round(summary.duration_s, 3),
        "classes": classes,
        "workload_classes": own,
        "overall": {"rps": _r(o.rps), "output_tps": _r(o.output_tps, 1), "total_tps": _r(o.total_tps, 1),
                    "goodput_rps": _r(o.goodput_rps), "count": o.count, "failed": o.failed,
                    "cancelled": o.cancelled},
        "class_accuracy": _r(accuracy), "kendall_tau": _r(tau), "errors": o.errors,
    }


def _get(row: dict[str, Any] | None, cls: str, key: str) -> float | None:
    if row is None:
        return None
    if cls == "overall":
        return row["overall"].get(key)
    return (row["classes"].get(cls) or {}).get(key)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 3)


# (name, numerator mode, denominator mode, class, metric, comparison, target)
TARGETS = (
    ("short TTFT p99, fifo / short_first", "fifo", "short_first", "short", "ttft_p99_s", ">=", 5.0),
    ("short E2E mean, fifo / short_first", "fifo", "short_first", "short", "e2e_mean_s", ">=", 3.0),
    ("output TPS, short_first / fifo", "short_first", "fifo", "overall", "output_tps", ">=", 0.98),
    ("long E2E p99, short_first / fifo", "short_first", "fifo", "long", "e2e_p99_s", "<=", 1.5),
    ("short E2E mean, short_first / oracle", "short_first", "oracle", "short", "e2e_mean_s", "<=", 1.2),
    ("short TTFT p99, fifo / short_first_reserved", "fifo", "short_first_reserved", "short", "ttft_p99_s",
     ">=", 5.0),
    ("short E2E mean, fifo / short_first_reserved", "fifo", "short_first_reserved", "short", "e2e_mean_s",
     ">=", 3.0),
    ("output TPS, short_first_reserved / fifo", "short_first_reserved", "fifo", "overall", "output_tps",
     ">=", 0.98),
    ("long E2E p99, short_first_reserved / fifo", "short_first_reserved", "fifo", "long", "e2e_p99_s",
     "<=", 1.5),
    ("short TTFT p99, short_first / short_first_reserved", "short_first", "short_first_reserved", "short",
     "ttft_p99_s", None, None),
    ("short TTFT p99, static_high / adaptive_high", "static_high", "adaptive_high", "short", "ttft_p99_s",
     ">=", 3.0),
    ("output TPS, adaptive_high / static_high", "adaptive_high", "static_high", "overall", "output_tps",
     ">=", 0.95),
    ("short TTFT p99, static_high_oracle / adaptive_high_oracle", "static_high_oracle", "adaptive_high_oracle",
     "short", "ttft_p99_s", ">=", 3.0),
    ("output TPS, adaptive_high_oracle / static_high_oracle", "adaptive_high_oracle", "static_high_oracle",
     "overall", "output_tps", ">=", 0.95),
    ("short TTFT p99, oracle / oracle_reserved", "oracle", "oracle_reserved", "short", "ttft_p99_s", None, None),
    ("output TPS, oracle_reserved / fifo", "oracle_reserved", "fifo", "overall", "output_tps", ">=", 0.98),
    ("short TTFT p99, short_first / short_first_preempt", "short_first", "short_first_preempt", "short",
     "ttft_p99_s", None, None),
    ("long E2E p99, short_first_preempt / short_first", "short_first_preempt", "short_first", "long",
     "e2e_p99_s", None, None),
    ("output TPS, short_first_preempt / fifo", "short_first_preempt", "fifo", "overall", "output_tps", None, None),
    ("short TTFT p99, oracle / oracle_preempt", "oracle", "oracle_preempt", "short", "ttft_p99_s", None, None),
    ("short TTFT p99, fifo / direct", "fifo", "direct", "short", "ttft_p99_s", None, None),
    ("output TPS, fifo / direct", "fifo", "direct", "overall", "output_tps", None, None),
)


def ratios(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (load, target): the measured ratio and whether it meets the target."""
    out = []
    for load in sorted({r["load"] for r in runs}):
        by_mode = {r["mode"]: r for r in runs if r["load"] == load}
        for name, num, den, cls, key, cmp, target in TARGETS:
            value = _ratio(_get(by_mode.get(num), cls, key), _get(by_mode.get(den), cls, key))
            met = None
            if value is not None and target is not None:
                met = value >= target if cmp == ">=" else value <= target
            out.append({"load": load, "ratio": name, "value": value,
                        "target": None if target is None else f"{cmp} {target}", "met": met})
    return out

