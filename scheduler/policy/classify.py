"""From a request to its place in the queue: prediction -> bound -> class -> slack.

The classifier owns no state of its own: the predictor learns, the policy is a pure
function, and this module only puts them together for one request.

Predictors read the request's text (and what they learned); the client's length hint
(``x-triage-expected-tokens``) and its ``max_tokens`` cap are applied here, once, for
every predictor alike (:func:`bound`): a hint, when given, is the prediction, never
above the cap; otherwise the model's prediction, capped at ``max_tokens``.

A request for ``n`` choices is ``n`` generations: the engine decodes each in full,
so it is placed as ``n`` times the work of one (the prediction, hence the class and
the queue order, is ``n`` times the per-choice prediction), and what it teaches the
predictor is the length of one choice (its usage divided by ``n``), since the text
the predictor reads asks for one reply, whatever ``n`` is.
"""

from __future__ import annotations

from scheduler.policy.order import PolicyName, PolicyParams, order
from scheduler.types import ClassThresholds, Placement, PredictInput, Prediction, PredictionSource, Predictor


def hinted(hint: int | None, cap: int | None) -> Prediction | None:
    """What does the client's own length hint predict? The hint itself, never above the
    cap (a reply cannot run past ``max_tokens``); None when no hint was given.

    A hint or a cap that is not positive counts as not given."""
    if hint is None or hint <= 0:
        return None
    tokens = float(hint if cap is None or cap <= 0 else min(hint, cap))
    return Prediction(tokens, tokens, PredictionSource.HINT)


def capped(prediction: Prediction, cap: int | None) -> Prediction:
    """What does a model's prediction become under the client's ``max_tokens``? The cap
    itself (source ``CAP``) where it is below the estimate; otherwise the estimate, its
    upper quantile no higher than the cap. No cap (or one not positive): unchanged."""
    if cap is None or cap <= 0:
        return prediction
    if cap < prediction.tokens:
        return Prediction(float(cap), float(cap), PredictionSource.CAP)
    return Prediction(prediction.tokens, min(prediction.upper, float(cap)), prediction.source)


def bound(prediction: Prediction, hint: int | None, cap: int | None) -> Prediction:
    """What is a request's prediction, once the client's hint and cap are applied? The
    hint when given (never above the cap); else the model's prediction capped at
    ``max_tokens`` (source ``CAP`` where the cap binds)."""
    return hinted(hint, cap) or capped(prediction, cap)


class Classifier:
    def __init__(
        self, predictor: Predictor, policy: PolicyName, params: PolicyParams, thresholds: ClassThresholds
    ) -> None:
        self.predictor = predictor
        # A predictor that runs a neural network (milliseconds of CPU) says so with
        # ``blocking = True``; ``Scheduler.admit`` then calls place() in a worker thread.
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
            # a hinted request needs no model: the hint is the prediction
            prediction = hinted(inp.hint, inp.max_tokens) or capped(self.predictor.predict(inp), inp.max_tokens)
        if inp.n > 1:
            prediction = Prediction(prediction.tokens * inp.n, prediction.upper * inp.n, prediction.source)
        cls = self._thresholds.classify(prediction.tokens)
        return Placement(prediction, cls, order(self.policy, prediction.tokens, tier, inp.tenant, self._params))

    def learn(self, inp: PredictInput, completion_tokens: int) -> None:
        """Teach the predictor a finished request's length: per choice."""
        self.predictor.observe(inp, round(completion_tokens / inp.n) if inp.n > 1 else completion_tokens)
