"""Slow clients against a replica with half-second deadlines: each kind (head trickled,
body trickled, silent) is cut off with 408, and ``/health`` and a normal request are
answered meanwhile."""

from __future__ import annotations

from loadtests.chaos.checks import Target, settle
from loadtests.chaos.slow import KINDS, SlowResult, slow_clients


async def test_each_kind_of_slow_client_is_cut_off_and_the_replica_answers_meanwhile(replica: Target) -> None:
    result = await slow_clients(replica, 6, every_s=0.05, timeout_s=30)
    assert {kind: dict(c) for kind, c in result.statuses.items()} == {k: {408: 2} for k in KINDS}
    assert result.health_during == 200
    assert result.normal_during == 200
    summary = result.summary()
    assert set(summary) == set(KINDS) and all(s["n"] == 2 for s in summary.values())
    assert all(s["median_s"] <= s["max_s"] for s in summary.values())
    found, _ = await settle(replica)
    assert found.clean, found


def test_the_summary_leaves_out_kinds_with_no_client() -> None:
    result = SlowResult(3, cut_off_s={"head": [1.0, 3.0, 2.0], "body": []})
    assert result.summary() == {"head": {"n": 3, "median_s": 2.0, "max_s": 3.0}}
