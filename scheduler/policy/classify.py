"""From a request to its place in the queue: prediction -> class -> slack.

The classifier owns no state of its own: the predictor learns, the policy is a pure
function, and this module only puts them together for one request.

A request for ``n`` choices is ``n`` generations: the engine decodes each in full,
so it is placed as ``n`` times the work of one (the prediction, hence the class and
the queue order, is ``n`` times the per-choice prediction), and what it teaches the
predictor is the length of one choice (its usage divided by ``n``), since the text
the predictor reads asks for one reply, whatever ``n`` is.
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
        """``true_tokens`` is the oracle's input (per choice), honoured only under the oracle policy."""
        if self.policy is PolicyName.ORACLE and true_tokens is not None:
            prediction = Prediction(true_tokens, true_tokens, PredictionSource.ORACLE)
        else:
            prediction = self.predictor.predict(inp)
        if inp.n > 1:
            prediction = Prediction(prediction.tokens * inp.n, prediction.upper * inp.n, prediction.source)
        cls = self._thresholds.classify(prediction.tokens)
        return Placement(prediction, cls, order(self.policy, prediction.tokens, tier, inp.tenant, self._params))

    def learn(self, inp: PredictInput, completion_tokens: int) -> None:
        """Teach the predictor a finished request's length: per choice."""
        self.predictor.observe(inp, round(completion_tokens / inp.n) if inp.n > 1 else completion_tokens)
