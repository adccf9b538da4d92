"""A paused and resumed stream is measured twice: as its client saw it (one response,
pauses included) and as the backend served its last part (what the adaptive limit learns)."""

from __future__ import annotations

import pytest

from gateway.telemetry.stream_stats import StreamStats


def test_a_single_part_stream_is_the_same_in_both_views() -> None:
    stats = StreamStats(part_started=10.0)
    stats.first_chunk_at = stats.part_first_at = 10.5
    stats.ended_at = 12.5
    assert stats.ttft_s == 0.5
    assert stats.tpot_s(21) == stats.client_tpot_s(21) == pytest.approx(0.1)


def test_a_resumed_part_is_measured_from_its_own_call_and_tokens() -> None:
    stats = StreamStats(part_started=10.0)
    stats.first_chunk_at = stats.part_first_at = 10.5  # the first part's first token
    stats.completed, stats.error = True, "broken by the pause"
    stats.new_part(carried=100)  # paused after 100 tokens; the continuation is sent at 40.0
    assert (stats.part_first_at, stats.completed, stats.error) == (None, False, None)
    stats.part_started, stats.part_first_at, stats.ended_at = 40.0, 40.8, 45.8
    assert stats.first_chunk_at == 10.5  # the client's first token stays the first part's
    assert stats.ttft_s == pytest.approx(0.8)  # not 10.5 - 40.0 (negative)
    assert stats.tpot_s(151) == pytest.approx(0.1)  # 50 tokens of its own in 5 s, the pause not counted
    assert stats.client_tpot_s(151) == pytest.approx((45.8 - 10.5) / 150)  # the client waited through the pause
