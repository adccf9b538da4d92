"""Rank agreement between predicted and actual lengths: Kendall's tau-b and Spearman.

One implementation for the predictor's evaluation, the gateway's live accuracy gauge
and the load generator's reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b in O(n log n) (Knight 1966): count discordant pairs as the
    swaps of a merge sort of y, after sorting by (x, y); ties handled as in tau-b."""
    n = len(x)
    n0 = n * (n - 1) // 2
    pairs = sorted(zip(x, y, strict=True))
    ties_x = _tied_pairs([p[0] for p in pairs])
    ties_xy = _tied_pairs(pairs)
    ys = [p[1] for p in pairs]
    swaps = _merge_count(ys)  # sorts ys in place
    ties_y = _tied_pairs(ys)
    denom = math.sqrt((n0 - ties_x) * (n0 - ties_y))
    if denom == 0:
        return None  # undefined: one side has a single value
    return (n0 - ties_x - ties_y + ties_xy - 2 * swaps) / denom


def _tied_pairs(sorted_values: Sequence[object]) -> int:
    total = 0
    run = 1
    for i in range(1, len(sorted_values) + 1):
        if i < len(sorted_values) and sorted_values[i] == sorted_values[i - 1]:
            run += 1
        else:
            total += run * (run - 1) // 2
            run = 1
    return total


def _merge_count(values: list[float]) -> int:
    """Sort ``values`` in place; return the number of inversions."""
    if len(values) < 2:
        return 0
    mid = len(values) // 2
    left, right = values[:mid], values[mid:]
    swaps = _merge_count(left) + _merge_count(right)
    i = j = k = 0
    while i < len(left) and j < len(right):
        if right[j] < left[i]:
            values[k] = right[j]
            swaps += len(left) - i
            j += 1
        else:
            values[k] = left[i]
            i += 1
        k += 1
    values[k:] = left[i:] + right[j:]
    return swaps


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    var = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / var if var else 0.0
