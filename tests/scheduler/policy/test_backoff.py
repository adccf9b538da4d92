"""The give-up rule of an overload refusal (429/503), table-tested."""

from __future__ import annotations

import pytest

from scheduler.policy.backoff import cannot_wait, deadline_left, give_up, out_of_attempts

MAX = 20


@pytest.mark.parametrize(("timeout_s", "age_s", "want"), [
    (30.0, 10.0, 20.0),
    (30.0, 30.0, 0.0),
    (30.0, 31.0, -1.0),
    (0.0, 10.0, None),  # no deadline
    (-1.0, 10.0, None),
])
def test_deadline_left(timeout_s: float, age_s: float, want: float | None) -> None:
    assert deadline_left(timeout_s, age_s) == want


@pytest.mark.parametrize(("left_s", "attempts", "want"), [
    (10.0, 1, False),
    (None, 1, False),  # no deadline: only the attempts bound it
    (None, MAX, False),  # the last attempt allowed
    (None, MAX + 1, True),
    (10.0, MAX + 1, True),
    (0.0, 1, True),  # the deadline is now
    (-0.5, 1, True),
    (0.001, 1, False),
])
def test_out_of_attempts(left_s: float | None, attempts: int, want: bool) -> None:
    assert out_of_attempts(left_s, attempts, MAX) is want


@pytest.mark.parametrize(("left_s", "ready_in", "want"), [
    (10.0, None, True),  # no healthy backend of the model
    (None, None, True),
    (10.0, 0.0, False),  # one is ready now
    (10.0, 9.9, False),
    (10.0, 10.0, True),  # ready only at the deadline
    (10.0, 30.0, True),
    (None, 3600.0, False),  # no deadline: any wait will do
])
def test_cannot_wait(left_s: float | None, ready_in: float | None, want: bool) -> None:
    assert cannot_wait(left_s, ready_in) is want


@pytest.mark.parametrize(("left_s", "attempts", "ready_in", "want"), [
    (10.0, 1, 2.0, False),  # queue again
    (None, 5, 2.0, False),
    (0.0, 1, 0.0, True),  # past the deadline, whoever is ready
    (None, MAX + 1, 0.0, True),  # out of attempts
    (10.0, 1, None, True),  # nobody healthy
    (10.0, 1, 12.0, True),  # nobody before the deadline
])
def test_give_up(left_s: float | None, attempts: int, ready_in: float | None, want: bool) -> None:
    assert give_up(left_s, attempts, MAX, ready_in) is want
