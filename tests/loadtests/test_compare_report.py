"""The comparison's derived figures: class accuracy, Kendall tau, ratios against targets."""

from __future__ import annotations

import pytest

from loadtests.client import RequestRecord
from loadtests.compare_report import classification, gateway_class, ratios
from scheduler.predictor.ranking import kendall_tau_b


def served(tokens: int, cls: str) -> RequestRecord:
    return RequestRecord(index=0, cls="x", start_s=0.0, ok=True, planned_tokens=tokens, served_class=cls)


def test_gateway_class_thresholds() -> None:
    assert [gateway_class(n, 256, 1024) for n in (1, 256, 257, 1024, 1025)] == [
        "short", "short", "medium", "medium", "long"]


def test_kendall_tau_b() -> None:
    assert kendall_tau_b([1, 2, 3, 4], [1, 2, 3, 4]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau_b([1, 2, 3], [5, 5, 5]) is None
    # 10 pairs: 8 concordant, 2 tied in y only -> 8 / sqrt(10 * 8)
    assert kendall_tau_b([1, 2, 3, 4, 5], [1, 1, 2, 2, 3]) == pytest.approx(8 / 80**0.5)


def test_classification_accuracy() -> None:
    records = [served(50, "short"), served(2000, "long"), served(500, "short"), served(100, "short")]
    accuracy, tau = classification(records, 256, 1024)
    assert accuracy == pytest.approx(0.75)
    assert tau is not None and tau > 0
    assert classification([], 256, 1024) == (None, None)


def row(mode: str, short_ttft_p99: float, short_e2e: float, long_e2e_p99: float, tps: float) -> dict:
    return {"mode": mode, "load": 0.9,
            "classes": {"short": {"ttft_p99_s": short_ttft_p99, "e2e_mean_s": short_e2e},
                        "long": {"e2e_p99_s": long_e2e_p99}},
            "overall": {"output_tps": tps}}


def test_ratios_against_targets() -> None:
    runs = [row("fifo", 10.0, 6.0, 20.0, 1000.0), row("short_first", 1.0, 1.5, 25.0, 990.0),
            row("oracle", 0.8, 1.4, 24.0, 1000.0)]
    by_name = {x["ratio"]: x for x in ratios(runs)}
    assert by_name["short TTFT p99, fifo / short_first"]["value"] == 10.0
    assert by_name["short TTFT p99, fifo / short_first"]["met"] is True
    assert by_name["short E2E mean, fifo / short_first"]["value"] == 4.0
    assert by_name["output TPS, short_first / fifo"]["value"] == 0.99
    assert by_name["long E2E p99, short_first / fifo"]["value"] == 1.25
    assert by_name["short E2E mean, short_first / oracle"]["met"] is True
    assert by_name["output TPS, fifo / direct"]["value"] is None  # no direct run


def test_trace_scale_fits_the_wanted_count_in_the_window() -> None:
    from loadtests.compare_runs import trace_scale
    from loadtests.traces import TraceRow

    rows = [TraceRow(float(t), 10, 10) for t in range(100)]
    scale = trace_scale(rows, rate=2.0, duration_s=10.0)
    assert scale == pytest.approx(0.5)
    assert sum(1 for r in rows if r.t_s * scale <= 10.0) == 21  # rate x duration, and the one at the edge


def test_gateway_settings_from_the_command_line() -> None:
    from loadtests.compare_options import gateway_settings
    from loadtests.options import UsageError

    got = gateway_settings(["long_share_max=0.75", "reserve_slots=true", "tiers=[a, b]"])
    assert got == {"long_share_max": 0.75, "reserve_slots": True, "tiers": ["a", "b"]}
    for bad in ("long_share_max", "=1", "policy=fifo", "x=[1"):
        with pytest.raises(UsageError):
            gateway_settings([bad])


def test_classes_are_by_true_length_whatever_the_workload_calls_them() -> None:
    from loadtests.compare_report import run_row
    from loadtests.metrics import Warmup, summarize
    from loadtests.workload import Slo

    def done(i: int, cls: str, tokens: int, served: str) -> RequestRecord:
        return RequestRecord(index=i, cls=cls, start_s=float(i), ok=True, planned_tokens=tokens, served_class=served,
                             ttft_s=0.1 * (i + 1), e2e_s=1.0 + i, output_tokens=tokens)

    # the workload's "chat" class holds short and medium replies; its "essay" class a short one
    records = [done(0, "chat", 100, "long"), done(1, "chat", 600, "short"), done(2, "chat", 200, "short"),
               done(3, "essay", 50, "long")]
    slos = {"chat": Slo(ttft_s=0.25), "essay": Slo(ttft_s=1.0)}
    summary = summarize(records, slos, Warmup(), ["chat", "essay"])
    row = run_row("short_first", 0.9, 2.0, "w", summary, records, Warmup(), (256, 1024), slos)
    assert list(row["classes"]) == ["short", "medium", "long"]
    assert [row["classes"][c]["count"] for c in ("short", "medium", "long")] == [3, 1, 0]
    assert row["classes"]["long"]["ttft_p99_s"] is None  # empty, and says so
    assert row["classes"]["medium"]["e2e_mean_s"] == 2.0
    # goodput by each request's own SLO: chat 0.1 s and essay 0.4 s meet theirs, chat 0.3 s does not
    assert row["classes"]["short"]["goodput_rps"] == round(2 / summary.duration_s, 4)
    assert {k: v["count"] for k, v in row["workload_classes"].items()} == {"chat": 3, "essay": 1}
    assert row["class_accuracy"] == 0.25  # served "short" for the 200-token reply only
