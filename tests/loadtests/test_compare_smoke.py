"""``compare --smoke``: every process starts and stops, the JSON has its shape, no request is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.__main__ import main


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_compare_smoke(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    code = main(["compare", "--smoke", "--out", str(out), "--json", str(tmp_path / "c.json"), "--quiet"])
    assert code == 0
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["schema"] == "triage.compare/1"
    assert report["capacity"]["rps"] > 0
    runs = report["runs"]
    assert [r["mode"] for r in runs] == ["direct", "fifo", "short_first", "oracle"]
    assert len({r["load"] for r in runs}) == 1
    sent = {r["sent"] for r in runs}
    assert len(sent) == 1  # the same seeded schedule in every mode
    for r in runs:
        assert set(r["overall"]) >= {"rps", "output_tps", "total_tps"}
        assert list(r["classes"]) == ["short", "medium", "long"]  # by true length, for every workload
        assert set(r["workload_classes"]) <= {"short", "long"}  # mixed's own split, kept apart
        total = 0
        for cls in r["classes"].values():
            assert set(cls) >= {"ttft_p50_s", "ttft_p99_s", "e2e_mean_s", "e2e_p99_s", "goodput_rps",
                                "count", "failed"}
            total += cls["count"] + cls["failed"] + cls["cancelled"]
        assert total == r["sent"]  # every request completed or was counted as failed
    oracle = next(r for r in runs if r["mode"] == "oracle")
    assert oracle["class_accuracy"] == 1.0  # it is handed the true length
    assert {x["ratio"] for x in report["ratios"]} >= {"short TTFT p99, fifo / short_first"}
    assert (out / "compare.md").is_file() and (out / "compare.png").is_file()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_compare_smoke_with_hidden_lengths(tmp_path: Path) -> None:
    from loadtests.length_table import read_length_table

    out = tmp_path / "cmp"
    code = main(["compare", "--smoke", "--workload", "sharegpt-chat", "--modes", "direct,fifo,oracle",
                 "--out", str(out), "--quiet"])
    assert code == 0
    report = json.loads((out / "compare.json").read_text())
    assert report["config"]["lengths"] == "hidden"
    assert read_length_table(Path(report["config"]["length_table"]))  # the simulators' table, kept with the run
    for r in report["runs"]:
        assert list(r["classes"]) == ["short", "medium", "long"]
        assert set(r["workload_classes"]) <= {"sharegpt", "alpaca"}
        records = [json.loads(line) for line in (out / "runs" / f"{r['mode']}-{r['load']}.jsonl").open()]
        assert len(records) == r["sent"]
        for rec in records:
            assert rec["ok"]
            assert rec["output_tokens"] == rec["planned_tokens"]  # the simulators stopped at the true length
    oracle = next(r for r in report["runs"] if r["mode"] == "oracle")
    assert oracle["class_accuracy"] == 1.0  # it alone is sent the true length
