"""``python -m simulator.calibrate``: closed-loop clients against the engine in process,
measured as a benchmark client would."""

from __future__ import annotations

import sys

import pytest

from simulator.calibrate import main, measure
from simulator.profiles import FAST


async def test_a_level_is_measured_from_its_steady_window() -> None:
    result = await measure(FAST, concurrency=2, rounds=2, prompt=16, output=8)
    assert result.concurrency == 2
    assert result.ttft_ms > 0 and result.itl_ms >= 0 and result.output_tps > 0


def test_the_command_prints_a_markdown_table(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["calibrate", "--profile", "fast", "--concurrency", "1", "2", "--rounds", "2", "--prompt", "8", "--output", "4"]
    monkeypatch.setattr(sys, "argv", argv)
    main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "profile fast: prompt 8 tokens, output 4 tokens"
    assert lines[1] == "| concurrency | TTFT ms | ITL ms | output tok/s |"
    assert [line.split("|")[1].strip() for line in lines[3:]] == ["1", "2"]
