"""The gateway's settings as the queue-order policy's parameters."""

from __future__ import annotations

from gateway.app import policy_params
from gateway.settings import Settings


def test_the_short_lane_ends_at_the_short_class() -> None:
    assert policy_params(Settings()).lane_max_tokens is None  # off by default
    assert policy_params(Settings(short_lane=True)).lane_max_tokens == 256.0
    assert policy_params(Settings(short_lane=True, short_max_tokens=100)).lane_max_tokens == 100.0
