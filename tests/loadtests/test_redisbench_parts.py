"""``triage bench redis`` in parts: its flags, one measured row on the session's Valkey
(the pool it made is gone afterwards), the baseline read from git and run side by side,
and the report's table."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from redis.asyncio import Redis

from loadtests import redisbench
from loadtests.redisbench import Row, git_source, measure, run_rows, table

ROOT = Path(__file__).resolve().parents[2]


def _row(version: str, per_s: float, commands: float, backends: int = 1, queued: int = 0) -> Row:
    return Row(version, backends, queued, 100, 1.0, per_s, per_s / 2, commands, 1e6 / per_s)


def test_the_flags_and_their_defaults() -> None:
    parser = argparse.ArgumentParser()
    redisbench.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.backends, args.queued) == ([1, 8, 64], [0, 100, 10_000])
    assert (args.seconds, args.concurrency, args.baseline, args.redis_url, args.json) == (4.0, 8, None, None, None)
    args = parser.parse_args(["--backends", "2, 4,", "--queued", "7", "--json", "out.json"])
    assert (args.backends, args.queued, args.json) == ([2, 4], [7], Path("out.json"))
    with pytest.raises(SystemExit):
        parser.parse_args(["--backends", "two"])


def test_the_table_has_a_line_per_row_and_ratios_against_the_baseline() -> None:
    rows = [_row("abc123", 1000.0, 10.0), _row("current", 2000.0, 5.0),
            _row("abc123", 500.0, 12.0, queued=100), _row("current", 400.0, 16.0, queued=100)]
    lines = table(rows, "abc123").splitlines()
    assert lines[2] == "| 1 | 0 | abc123 | 1,000 | 500 | 10.0 | 1000.0 |"
    assert lines[3] == "| 1 | 0 | current | 2,000 | 1,000 | 5.0 | 500.0 |"
    assert lines[-2:] == ["| 1 | 0 | 2.00x | 2.00x |", "| 1 | 100 | 0.80x | 0.75x |"]
    assert len(table(rows[1::2], None).splitlines()) == 4  # no baseline: no ratio table


async def test_one_row_is_measured_on_a_fresh_pool_that_is_deleted_after(redis_url: str, redis: Redis) -> None:
    row = await measure(redis_url, backends=3, queued=10, seconds=0.1, concurrency=2)
    assert (row.version, row.backends, row.queued) == ("current", 3, 10)
    assert row.requests > 0 and row.seconds > 0
    assert row.scheduled_per_s > 0 and row.achieved_per_s > 0 and row.redis_cpu_us_per_request > 0
    assert row.commands_per_request >= 2  # at least the enqueue and the release
    assert [k async for k in redis.scan_iter(match="bench*")] == []


def test_git_source_reads_a_commits_scripts_and_refuses_a_ref_without_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    source = git_source("HEAD")
    assert "redis.call" in source("enqueue.lua")
    assert source("no-such-script.lua") == ""  # a file the commit lacks reads as empty
    with pytest.raises(SystemExit, match="no scheduler/queue/lua/enqueue.lua at 'no-such-ref'"):
        git_source("no-such-ref")


async def test_a_baseline_runs_beside_the_current_scripts_row_by_row(
    embedded_redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    seen: list[Row] = []
    rows = await run_rows(embedded_redis_url, [1, 2], [0], seconds=0.05, concurrency=1, baseline="HEAD",
                          on_row=seen.append)
    assert [(r.version, r.backends) for r in rows] == [("HEAD", 1), ("current", 1), ("HEAD", 2), ("current", 2)]
    assert seen == rows
    assert all(r.requests > 0 for r in rows)
    ratios = [line for line in table(rows, "HEAD").splitlines() if re.fullmatch(r"\| \d \| 0 \| [\d.]+x \| [\d.]+x \|", line)]
    assert [line.split(" | ")[0] for line in ratios] == ["| 1", "| 2"]  # one ratio line per pair
