"""The dashboard's window: per class, one-second slots of counts in a ring and latency
samples, over the last ``window_s`` seconds of a clock the test moves."""

from __future__ import annotations

import pytest

from gateway.telemetry.stats import WindowStats, percentile, summarize


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([], 50, None), ([3.0], 99, 3.0), ([4.0, 1.0, 3.0, 2.0], 50, 2.0), ([4.0, 1.0, 3.0, 2.0], 75, 3.0),
     (list(map(float, range(1, 101))), 99, 99.0)],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected


def test_classes_are_listed_before_their_first_request() -> None:
    stats = WindowStats(window_s=10, classes=("short", "long"), clock=Clock())
    snapshot = stats.snapshot()
    assert set(snapshot) == {"short", "long"}
    assert snapshot["short"]["requests"] == 0 and snapshot["short"]["ttft_p50_s"] is None


def test_counts_rates_and_samples_over_the_window() -> None:
    clock = Clock()
    stats = WindowStats(window_s=10, clock=clock)
    stats.completed("short", True, 100, ttft_s=0.1, tpot_s=0.01, queue_s=0.5, pauses=1)
    clock.now += 1
    stats.completed("short", True, 50, ttft_s=0.3, tpot_s=None, queue_s=None)
    stats.completed("short", False, None, None, None, None)
    stats.rejected("short")

    s = stats.snapshot()["short"]
    assert (s["requests"], s["errors"], s["rejections"], s["output_tokens"]) == (2, 1, 1, 150)
    assert s["rps"] == pytest.approx(0.2) and s["output_tps"] == pytest.approx(15.0)
    assert s["ttft_p50_s"] == 0.1 and s["ttft_p99_s"] == 0.3 and s["tpot_p50_s"] == 0.01
    assert s["pauses_per_request"] == 0.5 and s["samples"] == 2
    assert stats.timeline()[-2:] == [
        {"ago_s": 1, "requests": 1, "output_tokens": 100}, {"ago_s": 0, "requests": 1, "output_tokens": 50},
    ]
    assert len(stats.timeline()) == 10


def test_what_is_older_than_the_window_drops_out() -> None:
    clock = Clock()
    stats = WindowStats(window_s=10, clock=clock)
    stats.completed("short", True, 100, 0.1, None, None)
    clock.now += 9
    assert stats.snapshot()["short"]["requests"] == 1
    clock.now += 2  # past the window: its slot is out, and will be reused
    assert stats.snapshot()["short"]["requests"] == 0 and stats.snapshot()["short"]["samples"] == 0
    stats.completed("short", True, 7, None, None, None)  # the same slot of the ring, a new second
    assert stats.snapshot()["short"]["output_tokens"] == 7


def test_summarize_reads_a_summed_window() -> None:
    summed = {"requests": 4, "errors": 0, "rejections": 2, "output_tokens": 40, "pauses": 2,
              "ttft": [0.4, 0.1, 0.2, 0.3], "tpot": [], "queue": [1.0], "samples": 4}
    s = summarize(summed, 2)
    assert s["rps"] == 2.0 and s["output_tps"] == 20.0 and s["ttft_p50_s"] == 0.2 and s["tpot_p50_s"] is None
    assert s["queue_wait_p99_s"] == 1.0 and s["pauses_per_request"] == 0.5
