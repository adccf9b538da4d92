"""How well the length predictor ranks requests: a rolling Kendall tau.

Short-first scheduling needs the *order* of predictions to be right more than their
size, so next to the error-ratio histogram (``metrics.py``) each replica keeps the last
``size`` (predicted, actual) pairs and reports Kendall's tau-b over them: 1 is a
perfect ranking, 0 no better than chance. Computed when read (a scrape, the stats
page), never on the request path: O(size²) comparisons, about 20 000 for 200 pairs.

Only replies that ended on their own are paired: one cut at ``max_tokens`` says
only "at least", and a prediction taken from the cap is trivially right. The
predictor learns from the same replies.
"""

from __future__ import annotations

import math
from collections import deque


def ratio(actual: int, predicted: float) -> float:
    """actual / predicted, both floored at one token."""
    return max(1, actual) / max(1.0, predicted)


def kendall_tau(pairs: list[tuple[float, float]]) -> float | None:
    """Kendall's tau-b (ties counted apart on each side); None when undefined."""
    concordant = discordant = ties_x = ties_y = 0
    n = len(pairs)
    for i in range(n):
        xi, yi = pairs[i]
        for j in range(i + 1, n):
            dx = xi - pairs[j][0]
            dy = yi - pairs[j][1]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    if denom == 0:
        return None
    return (concordant - discordant) / denom


class RankAccuracy:
    def __init__(self, size: int = 200) -> None:
        self._pairs: deque[tuple[float, float]] = deque(maxlen=size)

    def observe(self, predicted: float, actual: int) -> None:
        self._pairs.append((predicted, float(actual)))

    def __len__(self) -> int:
        return len(self._pairs)

    def tau(self) -> float | None:
        return kendall_tau(list(self._pairs))
