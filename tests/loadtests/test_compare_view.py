"""The comparison's Markdown table: counts per true-length class, scaled figures, and
ratios shown only where both modes ran (no servers needed: a report built by hand)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtests.compare_view import markdown, write_markdown


def figures(count: int, failed: int = 0, ttft_p99_s: float | None = None) -> dict[str, Any]:
    return {"count": count, "failed": failed, "cancelled": 0, "ttft_p50_s": None, "ttft_p99_s": ttft_p99_s,
            "e2e_mean_s": None, "e2e_p99_s": None, "goodput_rps": None}


def run(mode: str, accuracy: float | None) -> dict[str, Any]:
    return {"mode": mode, "load": 0.9, "rate_rps": 1.5,
            "classes": {"short": figures(5, failed=1, ttft_p99_s=0.25), "medium": figures(0), "long": figures(2)},
            "overall": {"rps": 1.4, "output_tps": 300.0, "count": 7, "failed": 1, "cancelled": 2},
            "class_accuracy": accuracy, "kendall_tau": None}


REPORT = {
    "config": {"workload": "sharegpt-chat", "backends": 1, "profile": "fast", "max_num_seqs": 4,
               "sim_time_scale": 1.0, "duration_s": 3.0, "warmup_s": 0.0, "seed": 0,
               "class_thresholds": [256, 1024], "lengths": "hidden"},
    "capacity": {"rps": 1.6667, "measured": True, "mean_output_tokens": 200.0},
    "runs": [run("direct", None), run("fifo", 0.75)],
    "ratios": [
        {"load": 0.9, "ratio": "short TTFT p99 fifo/short_first", "value": None, "target": ">= 5", "met": None},
        {"load": 0.9, "ratio": "short TTFT p99 fifo/direct", "value": 1.0, "target": None, "met": None},
        {"load": 0.9, "ratio": "output TPS short_first/fifo", "value": 0.9, "target": ">= 0.98", "met": False},
    ],
}


def test_each_class_counts_every_request_and_an_empty_one_shows_zero() -> None:
    text = markdown(REPORT)
    assert "| short n | 6 | 6 |" in text  # completed + failed + cancelled
    assert "| medium n | 0 | 0 |" in text
    assert "| medium E2E mean s | - | - |" in text  # no figure, not a zero


def test_figures_are_scaled_to_their_unit() -> None:
    text = markdown(REPORT)
    assert "| short TTFT p99 ms | 250 | 250 |" in text
    assert "| failed+cancelled | 3 | 3 |" in text
    assert "| class accuracy | - | 75% |" in text  # direct has no gateway to classify


def test_only_ratios_between_modes_that_ran_are_listed_and_a_miss_is_marked() -> None:
    text = markdown(REPORT)
    assert "fifo/short_first" not in text
    assert "| 0.90 | short TTFT p99 fifo/direct | 1.00 |  |  |" in text
    assert "| 0.90 | output TPS short_first/fifo | 0.90 | >= 0.98 | **no** |" in text


def test_the_basis_line_says_whether_the_client_told_the_lengths(tmp_path: Path) -> None:
    path = tmp_path / "out" / "compare.md"
    write_markdown(path, REPORT)
    text = path.read_text(encoding="utf-8")
    assert "short <= 256, medium <= 1024, long > 1024 tokens; lengths hidden" in text
    told = markdown({**REPORT, "config": {**REPORT["config"], "lengths": "max_tokens"}})
    assert "the client tells the length" in told
    assert "Capacity 1.667 req/s (measured; 200.0 output tokens per request)" in text
