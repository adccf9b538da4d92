"""The load generator against a real simulator on loopback: bounded by count, or by time."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests.__main__ import main
from loadtests.arrivals import ArrivalSpec, Process
from loadtests.client import Target
from loadtests.metrics import summarize
from loadtests.plan import LoadConfig, execute
from loadtests.runner import Limits
from loadtests.workload import Api, OutputRule, load_workload
from simulator.faults import FaultSettings
from simulator.settings import SimSettings
from simulator.testing import running_simulator


def test_loadtest_command_writes_report_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with running_simulator(SimSettings(profile="fast")) as url:
        code = main(["loadtest", "--url", url, "--workload", "synthetic", "--rate", "40", "--max-requests", "30",
                     "--duration", "120", "--warmup-requests", "5", "--out", str(out), "--quiet"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "triage.loadtest/1"
    s = report["summary"]
    assert s["sent"] == 30 and s["warmup_excluded"] == 5
    overall = s["overall"]
    assert overall["count"] == 25 and overall["failed"] == 0 and overall["cancelled"] == 0
    assert set(s["classes"]) <= {"short", "long"}
    for group in s["classes"].values():
        assert group["ttft_s"]["p50"] <= group["e2e_s"]["p50"]
        assert group["ttft_s"]["p50"] <= group["ttft_s"]["p99"]
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 30
    for rec in map(json.loads, lines):
        assert rec["ok"] and rec["output_tokens"] == rec["planned_tokens"]  # ignore_eos: exactly as asked
    assert (out / "latency_cdf.png").stat().st_size > 0 and (out / "timeline.png").stat().st_size > 0
    assert "| overall |" in (out / "summary.md").read_text()


async def test_closed_loop_non_streaming_completions() -> None:
    w = load_workload("synthetic")
    with running_simulator(SimSettings(profile="fast")) as url:
        cfg = LoadConfig(Target((url,), "sim-model", Api.COMPLETIONS, stream=False), w,
                         ArrivalSpec(Process.CONCURRENCY, concurrency=4), Limits(120.0, 12, 60.0))
        result = await execute(cfg)
    assert len(result.records) == 12
    assert all(r.ok and r.output_tokens == r.planned_tokens for r in result.records)
    assert all(r.ttft_s == r.e2e_s for r in result.records)  # no stream: the first byte is the last


async def test_time_bound_cancels_what_is_in_flight() -> None:
    from dataclasses import replace

    w = load_workload("synthetic")
    # each request wants 20,000 tokens (about 20 s on the fast profile); the run stops after 0.3 s
    w = replace(w, classes=tuple(replace(c, output=OutputRule("fixed", 1, 30_000, value=20_000))
                                 for c in w.classes))
    with running_simulator(SimSettings(profile="fast")) as url:
        cfg = LoadConfig(Target((url,), "sim-model"), w, ArrivalSpec(Process.POISSON, rate=100.0),
                         Limits(duration_s=0.3, max_requests=3, drain_s=0.0))
        result = await execute(cfg)
    assert len(result.records) == 3
    s = summarize(result.records, {})
    assert (s.overall.count, s.overall.failed, s.overall.cancelled) == (0, 0, 3)


async def test_failures_are_counted_by_status() -> None:
    w = load_workload("synthetic")
    sim = SimSettings(profile="fast", faults=FaultSettings(fail_rate=1.0, status_code=503))
    with running_simulator(sim) as url:
        cfg = LoadConfig(Target((url,), "sim-model"), w, ArrivalSpec(Process.POISSON, rate=50.0),
                         Limits(120.0, 8, 30.0))
        result = await execute(cfg)
    s = summarize(result.records, {c.name: c.slo for c in w.classes})
    assert s.overall.count == 0 and s.overall.failed == 8
    assert s.overall.errors == {"http_503": 8}
    assert s.overall.ttft_s.count == 0 and s.overall.goodput_rps == 0.0


def test_bad_workload_exits_2(tmp_path: Path, capsys) -> None:
    code = main(["loadtest", "--url", "http://127.0.0.1:9", "--workload", "nope", "--quiet",
                 "--out", str(tmp_path)])
    assert code == 2
    assert "unknown workload" in capsys.readouterr().err
