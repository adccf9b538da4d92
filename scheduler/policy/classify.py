"""From a request to its place in the queue: prediction -> class -> slack.

The classifier owns no state of its own: the predictor learns, the policy is a pure
function, and this module only puts them together for one request.
"""

from __future__ import annotations

from scheduler.policy.order import PolicyName, PolicyParams, order
from scheduler.types import ClassThresholds, Placement, PredictInput, Prediction, PredictionSource, Predictor


class Classifier:
    def __init__(
        self, predictor: Predictor, policy: PolicyName, params: PolicyParams, thresholds: ClassThresholds
    ) -> None:
        self.predictor = predictor
        # A predictor that runs a neural network (milliseconds of CPU) says so with
        # ``blocking = True``; the proxy then calls place() in a worker thread.
        self.blocking = bool(getattr(predictor, "blocking", False))
        self.policy = policy
        self._params = params
        self._thresholds = thresholds

    @property
    def params(self) -> PolicyParams:
        return self._params

    def place(self, inp: PredictInput, tier: str, true_tokens: int | None = None) -> Placement:
        """``true_tokens`` is the oracle's input, honoured only under the oracle policy."""
        if self.policy is PolicyName.ORACLE and true_tokens is not None:
            prediction = Prediction(true_tokens, true_tokens, PredictionSource.ORACLE)
        else:
            prediction = self.predictor.predict(inp)
        cls = self._thresholds.classify(prediction.tokens)
        return Placement(prediction, cls, order(self.policy, prediction.tokens, tier, inp.tenant, self._params))
