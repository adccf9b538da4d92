"""How often an arm broke the do-no-harm bound, beside how often FIFO broke it against itself.

The bound is read per repeat: an arm may be no worse than FIFO by more than 10% on short
E2E mean, medium E2E p99, long E2E p99 or output throughput. ``fifo_twin`` is FIFO again,
on the same trace in the same repeat: how often the twin "harms" FIFO is how often noise
alone breaks the bound. This pools the repeats of one or more ``bench compare`` JSON files
by arm and load, so an arm's rate can be read against that one::

    python -m loadtests.engines.harm docs/benchmarks/engine-llamacpp-*.json
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.engines.pairs import value

BOUND = 1.10  # worse than FIFO by more than 10%
TWIN = "fifo_twin"
# (name, part, figure, higher is better)
FIGURES = (
    ("short E2E mean", "short", "e2e_mean_s", False),
    ("medium E2E p99", "medium", "e2e_p99_s", False),
    ("long E2E p99", "long", "e2e_p99_s", False),
    ("output TPS", "overall", "output_tps", True),
)
_NOT_ARMS = ("fifo", "direct")  # the reference, and the arm with no gateway


@dataclass
class Tally:
    """One arm at one load: each repeat's worst figure against FIFO (how many times worse)."""

    worst: list[tuple[float, str]] = field(default_factory=list)

    def over(self) -> int:
        return sum(1 for ratio, _ in self.worst if ratio > BOUND)


def worst_against(arm: dict[str, Any], fifo: dict[str, Any]) -> tuple[float, str] | None:
    """How many times worse than FIFO the arm's worst figure was in one repeat, and which
    figure; None if no figure could be compared."""
    found: list[tuple[float, str]] = []
    for name, part, key, higher_better in FIGURES:
        a, f = value(arm, part, key), value(fifo, part, key)
        if a and f:
            found.append((f / a if higher_better else a / f, name))
    return max(found) if found else None


def tally(runs: list[dict[str, Any]], source: str = "") -> dict[tuple[str, float], Tally]:
    """Each arm's worst figure per repeat, by (arm, load); ``source`` keeps repeats of
    different files apart."""
    by_repeat: dict[tuple[str, float, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    for run in runs:
        by_repeat[(source, float(run["load"]), int(run["repeat"]))][run["mode"]] = run
    out: dict[tuple[str, float], Tally] = defaultdict(Tally)
    for (_, load, _), arms in sorted(by_repeat.items()):
        fifo = arms.get("fifo")
        if fifo is None:
            continue
        for mode, run in arms.items():
            if mode in _NOT_ARMS:
                continue
            got = worst_against(run, fifo)
            if got is not None:
                out[(mode, load)].worst.append(got)
    return out


def pooled(files: list[Path]) -> dict[tuple[str, float], Tally]:
    """The tallies of several result files, pooled by (arm, load)."""
    out: dict[tuple[str, float], Tally] = defaultdict(Tally)
    for path in files:
        for key, found in tally(json.loads(path.read_text())["runs"], str(path)).items():
            out[key].worst.extend(found.worst)
    return out


def more_than_noise(over: int, n: int, twin_over: int, twin_n: int) -> float:
    """One-sided Fisher's exact test: the chance that an arm doing no more harm than the twin
    breaks the bound in ``over`` or more of its ``n`` repeats, given the ``twin_over`` of
    ``twin_n`` the twin broke (all breaks shared out among the repeats at random)."""
    total, breaks = n + twin_n, over + twin_over
    ways = math.comb(total, n)
    return sum(math.comb(breaks, k) * math.comb(total - breaks, n - k)
               for k in range(over, min(n, breaks) + 1)) / ways


def markdown(tallies: dict[tuple[str, float], Tally]) -> str:
    """One row per arm and load, the FIFO twin first: repeats, how many broke the bound, the
    worst, and how likely that many breaks are from noise alone (against the twin at that load)."""
    lines = ["| arm | load | repeats | worse than FIFO by > 10% | share | worst repeat (figure) | p, noise alone |",
             "|---|---:|---:|---:|---:|---|---:|"]
    for (mode, load), found in sorted(tallies.items(), key=lambda kv: (kv[0][0] != TWIN, kv[0][1], kv[0][0])):
        n, over = len(found.worst), found.over()
        ratio, name = max(found.worst)
        twin = tallies.get((TWIN, load))
        p = "" if mode == TWIN or twin is None else f"{more_than_noise(over, n, twin.over(), len(twin.worst)):.2g}"
        lines.append(f"| `{mode}` | {load:g} | {n} | {over} | {over / n:.0%} | {ratio:.2f}× ({name}) | {p} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(pooled([Path(p) for p in sys.argv[1:]])))
