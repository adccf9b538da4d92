"""The classifier: the client's hint and cap applied once, whatever the predictor; a request
for n choices is n times the work, and teaches one choice's length."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduler.policy.classify import Classifier, bound, capped, hinted
from scheduler.policy.order import PolicyName, PolicyParams
from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.predictor.prior import PriorPredictor
from scheduler.types import (
    ClassThresholds,
    LengthClass,
    PredictInput,
    Prediction,
    PredictionSource,
    Predictor,
)


@dataclass
class Fixed:
    """A predictor that always says ``tokens``, and keeps what it is taught."""

    tokens: float
    taught: list[int] = field(default_factory=list)

    def predict(self, inp: PredictInput) -> Prediction:
        return Prediction(self.tokens, 2 * self.tokens, PredictionSource.LEARNED)

    def observe(self, inp: PredictInput, actual_tokens: int) -> None:
        self.taught.append(actual_tokens)


def _classifier(predictor: Predictor, policy: PolicyName = PolicyName.SHORT_FIRST) -> Classifier:
    return Classifier(predictor, policy, PolicyParams(), ClassThresholds(256, 1024))


def _inp(n: int = 1, hint: int | None = None, max_tokens: int | None = None) -> PredictInput:
    return PredictInput(model="m", tenant="t", prompt="hi", n=n, hint=hint, max_tokens=max_tokens)


H, C, L, P = PredictionSource.HINT, PredictionSource.CAP, PredictionSource.LEARNED, PredictionSource.PRIOR
MODEL = Prediction(200, 600, L)  # what a model said: 200 tokens, p90 600


@pytest.mark.parametrize(("case", "hint", "cap", "want"), [
    ("nothing given: the model's prediction", None, None, MODEL),
    ("a hint is the prediction", 42, None, Prediction(42, 42, H)),
    ("a hint above the model's guess still wins", 900, None, Prediction(900, 900, H)),
    ("a hint below its cap", 42, 100, Prediction(42, 42, H)),
    ("a hint never above the cap", 500, 100, Prediction(100, 100, H)),
    ("a hint equal to the cap", 100, 100, Prediction(100, 100, H)),
    ("a cap below the estimate is the prediction", None, 64, Prediction(64, 64, C)),
    ("a cap equal to the estimate does not bind", None, 200, Prediction(200, 200, L)),
    ("a cap between estimate and p90 bounds the p90", None, 300, Prediction(200, 300, L)),
    ("a generous cap changes nothing", None, 4096, MODEL),
    ("a hint or cap of 0 counts as not given", 0, 0, MODEL),
    ("a cap of 0 does not bound a hint", 42, 0, Prediction(42, 42, H)),
])
def test_bound(case: str, hint: int | None, cap: int | None, want: Prediction) -> None:
    got = bound(MODEL, hint, cap)
    assert got == want, case
    assert got == (hinted(hint, cap) or capped(MODEL, cap))


def test_a_prior_prediction_keeps_its_source_under_a_loose_cap() -> None:
    assert bound(Prediction(250, 1000, P), None, 500) == Prediction(250, 500, P)


@pytest.mark.parametrize("predictor", [Fixed(200), PriorPredictor(200), LengthPredictor(PredictorConfig(prior_tokens=200))],
                         ids=["fixed", "prior", "lexical"])
@pytest.mark.parametrize(("hint", "cap", "tokens", "source"), [
    (500, 100, 100, H),  # every predictor: a hint never above the cap
    (42, None, 42, H),
    (None, 64, 64, C),
    (None, None, 200, None),  # the predictor's own
])
def test_every_predictor_is_bounded_alike(
    predictor: Predictor, hint: int | None, cap: int | None, tokens: float, source: PredictionSource | None
) -> None:
    got = _classifier(predictor).place(_inp(hint=hint, max_tokens=cap), "interactive").prediction
    assert got.tokens == pytest.approx(tokens)
    assert got.source is (source or got.source) and got.upper >= got.tokens
    if cap is not None:
        assert got.upper <= cap


def test_a_hinted_request_asks_no_model() -> None:
    class Refuses(Fixed):
        def predict(self, inp: PredictInput) -> Prediction:
            raise AssertionError("the hint is the prediction")

    got = _classifier(Refuses(200)).place(_inp(hint=42), "interactive").prediction
    assert got == Prediction(42, 42, H)


def test_hint_and_cap_are_per_choice() -> None:
    got = _classifier(Fixed(200)).place(_inp(n=3, hint=500, max_tokens=100), "interactive")
    assert (got.prediction.tokens, got.prediction.source, got.cls) == (300, H, LengthClass.MEDIUM)


@pytest.mark.parametrize(("n", "tokens", "cls"), [
    (1, 200, LengthClass.SHORT),
    (2, 400, LengthClass.MEDIUM),
    (8, 1600, LengthClass.LONG),
])
def test_n_choices_are_n_times_the_prediction(n: int, tokens: float, cls: LengthClass) -> None:
    placement = _classifier(Fixed(200)).place(_inp(n), "interactive")
    assert placement.prediction.tokens == tokens and placement.prediction.upper == 2 * tokens
    assert placement.cls is cls
    one = _classifier(Fixed(200)).place(_inp(1), "interactive")
    assert (placement.order.slack_s > one.order.slack_s) == (n > 1)  # more work waits longer


def test_the_oracle_length_is_per_choice_too() -> None:
    placement = _classifier(Fixed(200), PolicyName.ORACLE).place(_inp(3), "interactive", true_tokens=10)
    assert (placement.prediction.tokens, placement.prediction.source) == (30, PredictionSource.ORACLE)


@pytest.mark.parametrize(("n", "usage", "taught"), [(1, 37, 37), (4, 400, 100), (3, 100, 33)])
def test_it_teaches_the_length_of_one_choice(n: int, usage: int, taught: int) -> None:
    predictor = Fixed(200)
    _classifier(predictor).learn(_inp(n), usage)
    assert predictor.taught == [taught]
