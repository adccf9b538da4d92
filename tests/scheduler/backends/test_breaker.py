"""The circuit breaker, answer by answer: UP -> DOWN -> PROBING -> UP."""

from __future__ import annotations

import pytest

from scheduler.backends.breaker import Breaker, Health

UP, DOWN, PROBING = Health.UP, Health.DOWN, Health.PROBING


@pytest.mark.parametrize(
    ("case", "answers", "healths"),
    [
        ("a good first probe is enough", [True], [UP]),
        ("a bad first answer: down at once", [False], [DOWN]),
        ("up stays up on good answers", [True, True, True], [UP, UP, UP]),
        ("threshold failures in a row open it", [True, False, False, False], [UP, UP, UP, DOWN]),
        ("a success resets the count", [True, False, False, True, False, False], [UP, UP, UP, UP, UP, UP]),
        ("down: a good answer half-opens", [True, False, False, False, True], [UP, UP, UP, DOWN, PROBING]),
        ("probing: any failure opens again", [True, False, False, False, True, False],
         [UP, UP, UP, DOWN, PROBING, DOWN]),
        ("probing: recover_successes good answers close it", [True, False, False, False, True, True, True, True],
         [UP, UP, UP, DOWN, PROBING, PROBING, PROBING, UP]),
        ("down stays down on failures", [False, False, False], [DOWN, DOWN, DOWN]),
    ],
)
def test_breaker(case: str, answers: list[bool], healths: list[Health]) -> None:
    breaker = Breaker(fail_threshold=3, recover_successes=3)
    assert breaker.health is PROBING  # unknown until the first answer
    assert [breaker.observe(ok) for ok in answers] == healths, case
