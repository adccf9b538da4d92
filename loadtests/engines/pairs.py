"""Which arms the engine benchmark sets side by side, and how: ratios of two arms' figures
within each repeat (the same noise hits both), then their median and range.

An arm with gateway settings of its own (``MODE@KEY=VALUE``, ``loadtests/modes.py``) is
set against its plain mode (what the settings change) and against FIFO (the do-no-harm
bound), on the figures the bound is read from.
"""

from __future__ import annotations

import statistics
from typing import Any

from loadtests.modes import split_arm


def value(row: dict[str, Any], cls: str, key: str) -> float | None:
    """One figure of one run's row: ``cls`` names the part (a class, ``overall``, ``tokens``,
    ``pauses``, ``engine``, ``engine_speed``, or ``limit``: the median of the sampled adaptive limit)."""
    if cls == "limit":  # the gateway's adaptive limit, sampled every 0.5 s during the run
        limits = [float(x["limit"]) for x in row.get("limit_trajectory") or [] if x.get("limit") is not None]
        return statistics.median(limits) if limits else None
    if cls == "tokens":
        part = row.get("tokens") or {}
    elif cls in ("pauses", "engine", "engine_speed"):
        part = row.get(cls) or {}
    else:
        part = row["overall"] if cls == "overall" else row["classes"].get(cls) or {}
    got = part.get(key)
    return None if got is None else float(got)


# (label, numerator arm, denominator arm, part, figure)
PAIRS: tuple[tuple[str, str, str, str, str], ...] = (
    ("short TTFT p99, fifo / short_first_preempt", "fifo", "short_first_preempt", "short", "ttft_p99_s"),
    ("short TTFT p99, fifo / short_first", "fifo", "short_first", "short", "ttft_p99_s"),
    ("short E2E mean, fifo / short_first_preempt", "fifo", "short_first_preempt", "short", "e2e_mean_s"),
    ("short E2E mean, fifo / short_first", "fifo", "short_first", "short", "e2e_mean_s"),
    ("short E2E mean, short_first_preempt / fifo", "short_first_preempt", "fifo", "short", "e2e_mean_s"),
    ("long E2E p99, short_first_preempt / fifo", "short_first_preempt", "fifo", "long", "e2e_p99_s"),
    ("output TPS, short_first_preempt / fifo", "short_first_preempt", "fifo", "overall", "output_tps"),
    ("output TPS, short_first_preempt / direct", "short_first_preempt", "direct", "overall", "output_tps"),
    ("output TPS, fifo / direct", "fifo", "direct", "overall", "output_tps"),
    ("short TTFT p99, direct / short_first_preempt", "direct", "short_first_preempt", "short", "ttft_p99_s"),
    ("medium E2E p99, short_first_preempt / fifo", "short_first_preempt", "fifo", "medium", "e2e_p99_s"),
    ("engine prompt tokens computed, short_first_preempt / fifo", "short_first_preempt", "fifo", "engine",
     "prompt_computed"),
    # the A/A control: two FIFO arms of the same run, as far apart as noise puts them
    ("short TTFT p99, fifo_twin / fifo", "fifo_twin", "fifo", "short", "ttft_p99_s"),
    ("short E2E mean, fifo_twin / fifo", "fifo_twin", "fifo", "short", "e2e_mean_s"),
    ("medium E2E p99, fifo_twin / fifo", "fifo_twin", "fifo", "medium", "e2e_p99_s"),
    ("long E2E p99, fifo_twin / fifo", "fifo_twin", "fifo", "long", "e2e_p99_s"),
    ("output TPS, fifo_twin / fifo", "fifo_twin", "fifo", "overall", "output_tps"),
    # what being pausable costs, pausing aside
    ("short E2E mean, fifo_pausable / fifo", "fifo_pausable", "fifo", "short", "e2e_mean_s"),
    ("long E2E p99, fifo_pausable / fifo", "fifo_pausable", "fifo", "long", "e2e_p99_s"),
    ("output TPS, fifo_pausable / fifo", "fifo_pausable", "fifo", "overall", "output_tps"),
    # what the order alone does, pausing aside
    ("short E2E mean, short_first / fifo", "short_first", "fifo", "short", "e2e_mean_s"),
    ("long E2E p99, short_first / fifo", "short_first", "fifo", "long", "e2e_p99_s"),
    ("short TTFT p99, short_first_preempt / oracle_preempt", "short_first_preempt", "oracle_preempt", "short",
     "ttft_p99_s"),
)

# what an arm with settings of its own is set against, and on what
_VARIANT_FIGURES = (
    ("short TTFT p99", "short", "ttft_p99_s", True),  # True: the baseline over the arm (higher is better)
    ("short E2E mean", "short", "e2e_mean_s", False),
    ("medium E2E p99", "medium", "e2e_p99_s", False),
    ("long E2E p99", "long", "e2e_p99_s", False),
    ("output TPS", "overall", "output_tps", False),
)


def variant_pairs(arms: list[str]) -> tuple[tuple[str, str, str, str, str], ...]:
    """The pairs of each arm with settings of its own: against its plain mode, then FIFO."""
    out = []
    for arm in arms:
        mode, own = split_arm(arm)
        if not own:
            continue
        for base in dict.fromkeys((mode, "fifo")):
            for label, cls, key, inverse in _VARIANT_FIGURES:
                num, den = (base, arm) if inverse else (arm, base)
                out.append((f"{label}, {num} / {den}", num, den, cls, key))
    return tuple(out)


def paired_ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ratios of two arms within each repeat (same noise), then their median and range: the
    fixed pairs, then each arm with settings of its own against its mode and against FIFO."""
    out = []
    for name, num, den, cls, key in PAIRS + variant_pairs(sorted({r["mode"] for r in runs})):
        values = []
        for rep in sorted({r["repeat"] for r in runs}):
            a = next((r for r in runs if r["repeat"] == rep and r["mode"] == num), None)
            b = next((r for r in runs if r["repeat"] == rep and r["mode"] == den), None)
            x, y = (value(a, cls, key) if a else None), (value(b, cls, key) if b else None)
            if x is not None and y:
                values.append(round(x / y, 3))
        if values:
            out.append({"ratio": name, "values": values, "median": statistics.median(values)})
    return out


