"""Hint trust: whose length hints hold, as pure functions and the per-tenant record."""

from __future__ import annotations

import pytest

from scheduler.policy.hints import HintParams, HintRecord, HintTrust, believed, ran_long, updated

P = HintParams()  # tolerance 2, slack 32, alpha 0.2, distrust above 0.5, after 5 seen


@pytest.mark.parametrize(("hint", "actual", "long"), [
    (100, 232, False),  # exactly 2 x 100 + 32: holds
    (100, 233, True),
    (1, 34, False),  # a tiny hint gets the slack
    (1, 35, True),
    (100, 0, False),  # running short costs nothing
    (300, 280, False),
])
def test_ran_long(hint: int, actual: int, long: bool) -> None:
    assert ran_long(hint, actual, P) is long


@pytest.mark.parametrize(("record", "hint", "actual", "want"), [
    (HintRecord(), 100, 500, HintRecord(1, 0.2)),
    (HintRecord(), 100, 100, HintRecord(1, 0.0)),
    (HintRecord(4, 0.5), 100, 500, HintRecord(5, 0.6)),
    (HintRecord(4, 0.5), 100, 100, HintRecord(5, 0.4)),
    (HintRecord(9, 1.0), 100, 500, HintRecord(10, 1.0)),
])
def test_updated(record: HintRecord, hint: int, actual: int, want: HintRecord) -> None:
    got = updated(record, hint, actual, P)
    assert got.seen == want.seen and got.long_share == pytest.approx(want.long_share)


@pytest.mark.parametrize(("record", "trusted"), [
    (None, True),  # never seen
    (HintRecord(4, 1.0), True),  # too few replies to judge
    (HintRecord(5, 0.5), True),  # at the threshold: still believed
    (HintRecord(5, 0.51), False),
    (HintRecord(100, 0.0), True),
])
def test_believed(record: HintRecord | None, trusted: bool) -> None:
    assert believed(record, P) is trusted


def test_params_are_honoured() -> None:
    strict = HintParams(tolerance=1.0, slack_tokens=0, alpha=1.0, distrust_above=0.0, min_seen=1)
    assert ran_long(10, 11, strict)
    assert not believed(updated(HintRecord(), 10, 11, strict), strict)


def test_a_tenant_that_runs_long_loses_the_trust_and_wins_it_back() -> None:
    trust = HintTrust()
    for _ in range(10):
        trust.observe("t", 1, 300)
    assert not trust.trusted("t")
    assert trust.trusted("other")  # tenants are judged apart
    for _ in range(10):
        trust.observe("t", 300, 280)  # still compared while ignored
    assert trust.trusted("t")


def test_trust_holds_for_the_first_replies_whatever_they_show() -> None:
    trust = HintTrust()
    for _ in range(P.min_seen - 1):
        trust.observe("t", 1, 10_000)
    assert trust.trusted("t")
    trust.observe("t", 1, 10_000)
    assert not trust.trusted("t")
    record = trust.record("t")
    assert record is not None and record.seen == P.min_seen

