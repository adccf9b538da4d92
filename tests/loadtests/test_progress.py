"""The live progress line's running figures (rendered without a terminal)."""

from __future__ import annotations

from loadtests.client import RequestRecord
from loadtests.progress import Progress


def test_the_line_counts_completions_and_failures_against_the_expected_total() -> None:
    progress = Progress("fifo @ 0.90", 10, 30.0, enabled=False)
    with progress:
        for i in range(3):
            progress.record(RequestRecord(i, "short", 0.0, True, 5, output_tokens=5, ttft_s=0.05 * (i + 1)))
        progress.record(RequestRecord(3, "short", 0.0, False, 5, error="timeout"))
        line = progress._render().plain
    assert line.startswith("fifo @ 0.90 ")
    assert "ok 3/10" in line and "failed 1" in line
    assert "TTFT p99 149 ms" in line  # over the completions only: 50, 100, 150 ms


def test_without_completions_the_rates_are_zero_and_the_p99_a_dash() -> None:
    progress = Progress.null()
    progress.record(RequestRecord(0, "short", 0.0, False, 5, error="http_503"))
    line = progress._render().plain
    assert "ok 0 " in line and "RPS   0.00" in line and "TTFT p99 -" in line
