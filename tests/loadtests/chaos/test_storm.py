"""A small disconnect storm against a replica: every client has a plan, those that stay
are served, and nothing is left queued, leased or running afterwards."""

from __future__ import annotations

from loadtests.chaos.checks import Target, normal_request
from loadtests.chaos.storm import WHEN, storm


async def test_a_small_storm_leaves_nothing_behind(replica: Target) -> None:
    result = await storm(replica, 20, seed=4, concurrency=10, timeout_s=30)
    assert result.clients == 20 and sum(result.plans.values()) == 20
    assert set(result.plans) <= set(WHEN) and len(result.plans) > 1
    assert result.server_errors == 0
    assert sum(result.statuses.values()) == result.plans["never"]  # only those that stayed are read
    assert set(result.statuses) <= {200}
    assert result.leftovers is not None and result.leftovers.clean, result.leftovers
    assert await normal_request(replica) == 200

