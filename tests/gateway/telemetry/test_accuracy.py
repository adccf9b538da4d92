"""The predictor's rank accuracy: a rolling Kendall tau over (predicted, actual) pairs."""

from __future__ import annotations

import pytest

from gateway.telemetry.accuracy import RankAccuracy, ratio


@pytest.mark.parametrize(
    ("actual", "predicted", "expected"),
    [(100, 50.0, 2.0), (25, 100.0, 0.25), (0, 10.0, 0.1), (10, 0.0, 10.0), (0, 0.0, 1.0)],
)
def test_ratio_floors_both_at_one_token(actual: int, predicted: float, expected: float) -> None:
    assert ratio(actual, predicted) == expected


def test_tau_is_one_for_a_perfect_ranking_and_minus_one_for_its_reverse() -> None:
    right, wrong = RankAccuracy(), RankAccuracy()
    for i, actual in enumerate((10, 20, 40, 80)):
        right.observe(float(i), actual)
        wrong.observe(float(-i), actual)
    assert right.tau() == pytest.approx(1.0) and wrong.tau() == pytest.approx(-1.0)
    assert len(right) == 4


def test_too_few_pairs_say_nothing() -> None:
    acc = RankAccuracy()
    assert acc.tau() is None
    acc.observe(1.0, 5)
    assert acc.tau() is None


def test_only_the_last_pairs_count() -> None:
    acc = RankAccuracy(size=3)
    for predicted, actual in ((1.0, 30), (2.0, 20), (3.0, 10)):  # reversed: tau -1
        acc.observe(predicted, actual)
    for predicted, actual in ((1.0, 10), (2.0, 20), (3.0, 30)):  # these push the others out
        acc.observe(predicted, actual)
    assert len(acc) == 3 and acc.tau() == pytest.approx(1.0)
