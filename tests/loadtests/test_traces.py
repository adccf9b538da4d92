"""Trace parsers on small inline samples."""

from __future__ import annotations

import random

import pytest

from loadtests.traces import TraceError, mean_rate, parse_azure, parse_mooncake, spread_quantised, window

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.1805900,879,0"""


def test_azure_rows_are_seconds_since_the_first() -> None:
    rows = parse_azure(AZURE.splitlines())
    assert [r.input_tokens for r in rows] == [374, 396, 879]
    assert [r.output_tokens for r in rows] == [44, 109, 1]  # 0 generated tokens become 1
    assert rows[0].t_s == 0.0
    assert rows[1].t_s == pytest.approx(4.314579, abs=1e-6)
    assert rows[2].t_s == pytest.approx(4.5, abs=1e-6)


def test_azure_bad_header_and_bad_line() -> None:
    with pytest.raises(TraceError, match="header"):
        parse_azure(["time,in,out", "x,1,2"])
    with pytest.raises(TraceError, match="line 3"):
        parse_azure(AZURE.splitlines()[:2] + ["2023-11-16 18:15:51,abc,3"])


def test_mooncake_synthetic_trace_keeps_its_times() -> None:
    lines = [
        '{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [0]}',
        '{"timestamp": 1500, "input_length": 200, "output_length": 6, "hash_ids": [1]}',
        '{"timestamp": 2250, "input_length": 300, "output_length": 7, "hash_ids": [2]}',
    ]
    rows = parse_mooncake(lines)
    assert [r.t_s for r in rows] == [0.0, 1.5, 2.25]
    assert [r.output_tokens for r in rows] == [5, 6, 7]


def test_mooncake_quantised_buckets_are_spread_over_the_quantum() -> None:
    # 3 s buckets with several requests each: most gaps are 0
    stamps = [0, 0, 0, 0, 3000, 3000, 3000, 6000, 6000, 6000, 6000]
    lines = [f'{{"timestamp": {t}, "input_length": 10, "output_length": 2}}' for t in stamps]
    rows = parse_mooncake(lines, seed=1)
    times = [r.t_s for r in rows]
    assert times == sorted(times)
    assert len(set(times)) == len(times)  # no two arrivals at the same instant any more
    assert sum(1 for t in times if t < 3.0) == 4  # per-bucket counts unchanged
    assert sum(1 for t in times if 3.0 <= t < 6.0) == 3
    assert parse_mooncake(lines, seed=1) == rows  # seeded


def test_spread_leaves_unquantised_rows_alone() -> None:
    rows = [(0.0, 1, 1), (0.4, 1, 1), (1.1, 1, 1), (1.5, 1, 1)]
    assert spread_quantised(rows, random.Random(0)) == rows


def test_mooncake_bad_line() -> None:
    with pytest.raises(TraceError, match="line 2"):
        parse_mooncake(['{"timestamp": 0, "input_length": 1, "output_length": 1}', '{"ts": 1}'])


def test_window_offset_and_time_scale() -> None:
    rows = parse_azure(AZURE.splitlines())
    w = window(rows, offset_s=1.0, time_scale=0.5)
    assert len(w) == 2
    assert w[0].t_s == 0.0
    assert w[1].t_s == pytest.approx((4.5 - 4.314579) * 0.5, abs=1e-6)
    assert mean_rate(rows) == pytest.approx(2 / 4.5, rel=1e-6)
    assert window(rows, offset_s=100.0) == []
