"""The predictor that learns nothing: a fixed prior for every request."""

from __future__ import annotations

from scheduler.types import PredictInput, Prediction, PredictionSource


class PriorPredictor:
    """Knows nothing: a fixed prior, its upper quantile four times that. The client's
    hint and ``max_tokens`` are applied by the classifier (``policy/classify.py``)."""

    def __init__(self, prior_tokens: float = 256.0) -> None:
        self._prior = prior_tokens

    def predict(self, inp: PredictInput) -> Prediction:
        return Prediction(self._prior, self._prior * 4, PredictionSource.PRIOR)

    def observe(self, inp: PredictInput, actual_tokens: int) -> None:
        return None
