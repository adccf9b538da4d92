"""The classifier: a request for n choices is n times the work, and teaches one choice's length."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduler.policy.classify import Classifier
from scheduler.policy.order import PolicyName, PolicyParams
from scheduler.types import ClassThresholds, LengthClass, PredictInput, Prediction, PredictionSource


@dataclass
class Fixed:
    """A predictor that always says ``tokens``, and keeps what it is taught."""

    tokens: float
    taught: list[int] = field(default_factory=list)

    def predict(self, inp: PredictInput) -> Prediction:
        return Prediction(self.tokens, 2 * self.tokens, PredictionSource.LEARNED)

    def observe(self, inp: PredictInput, actual_tokens: int) -> None:
        self.taught.append(actual_tokens)


def _classifier(predictor: Fixed, policy: PolicyName = PolicyName.SHORT_FIRST) -> Classifier:
    return Classifier(predictor, policy, PolicyParams(), ClassThresholds(256, 1024))


def _inp(n: int) -> PredictInput:
    return PredictInput(model="m", tenant="t", prompt="hi", n=n)


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
