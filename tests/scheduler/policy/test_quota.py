"""Quota policy: which limits bind a request, and what it reserves."""

from __future__ import annotations

import pytest

from scheduler.policy.quota import QuotaLimits, limits_for, plan, reserve_tokens

T1 = QuotaLimits(requests_per_minute=10)
DEFAULT = QuotaLimits(tokens_per_minute=1000)


@pytest.mark.parametrize(
    ("tenant", "key", "want"),
    [
        ("t1", None, (T1, QuotaLimits())),  # its own entry
        ("t2", None, (DEFAULT, QuotaLimits())),  # the default
        ("t2", QuotaLimits(concurrent=2), (DEFAULT, QuotaLimits(concurrent=2))),  # and the key's
    ],
)
def test_limits_for(tenant: str, key: QuotaLimits | None, want: tuple[QuotaLimits, QuotaLimits]) -> None:
    assert limits_for(tenant, DEFAULT, {"t1": T1}, key) == want


@pytest.mark.parametrize(
    ("chars", "predicted", "max_tokens", "want"),
    [
        (400, 50.0, None, 150),  # 100 input + 50 output
        (400, 50.0, 20, 120),  # never more output than the cap
        (3, 0.4, None, 2),  # rounded up
        (0, 0.0, 0, 1),  # at least one
    ],
)
def test_reserve_tokens(chars: int, predicted: float, max_tokens: int | None, want: int) -> None:
    assert reserve_tokens(chars, predicted, max_tokens) == want


def test_no_limit_anywhere_needs_no_check() -> None:
    assert plan("t", "k", QuotaLimits(), {}, None, 10) is None
    assert plan("t", "k", QuotaLimits(), {}, QuotaLimits(requests_per_minute=0), 10) is None  # 0 is off
    found = plan("t", "k", QuotaLimits(), {}, QuotaLimits(concurrent=1), 10)
    assert found is not None and found.reserve_tokens == 10 and found.key_limits.concurrent == 1
