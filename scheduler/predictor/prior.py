"""The predictor that learns nothing: the client's hint and cap, a fixed prior otherwise."""

from __future__ import annotations

from scheduler.types import PredictInput, Prediction, PredictionSource


class PriorPredictor:
    """Knows nothing but the client's hint and cap: a fixed prior otherwise."""

    def __init__(self, prior_tokens: float = 256.0) -> None:
        self._prior = prior_tokens

    def predict(self, inp: PredictInput) -> Prediction:
        if inp.hint is not None:
            return Prediction(inp.hint, inp.hint, PredictionSource.HINT)
        if inp.max_tokens is not None and inp.max_tokens < self._prior:
            return Prediction(inp.max_tokens, inp.max_tokens, PredictionSource.CAP)
        upper = self._prior * 4 if inp.max_tokens is None else min(self._prior * 4, inp.max_tokens)
        return Prediction(self._prior, upper, PredictionSource.PRIOR)

    def observe(self, inp: PredictInput, actual_tokens: int) -> None:
        return None
