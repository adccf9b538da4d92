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

from collections import deque

from scheduler.predictor.ranking import kendall_tau_b


def ratio(actual: int, predicted: float) -> float:
    """actual / predicted, both floored at one token."""
    return max(1, actual) / max(1.0, predicted)


class RankAccuracy:
    def __init__(self, size: int = 200) -> None:
        self._pairs: deque[tuple[float, float]] = deque(maxlen=size)

    def observe(self, predicted: float, actual: int) -> None:
        self._pairs.append((predicted, float(actual)))

    def __len__(self) -> int:
        return len(self._pairs)

    def tau(self) -> float | None:
        pairs = list(self._pairs)
        return kendall_tau_b([p[0] for p in pairs], [p[1] for p in pairs])
