"""``python -m loadtests.overhead --smoke``: it runs end to end, its JSON has the
documented shape, nothing failed, and every process it started is gone afterwards.
No timing is asserted: benchmarks report numbers, tests do not judge them."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests.overhead import procstat
from loadtests.overhead.cli import main

RATE_KEYS = {"rps", "target", "added_ttft_p50_ms", "added_ttft_p99_ms", "added_e2e_p50_ms", "added_e2e_p99_ms",
             "errors", "cpu_ms_per_request", "achieved_rps"}


def test_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    code = main(["--smoke", "--json", str(out), "--workdir", str(tmp_path / "work")])
    assert code == 0
    doc = json.loads(out.read_text())
    assert set(doc) >= {"rates", "relay_chunks_per_s", "redis_roundtrips_per_request"}
    rows = doc["rates"]
    assert {r["target"] for r in rows} == {"direct", "fifo"}
    for row in rows:
        assert RATE_KEYS <= set(row)
        assert row["rps"] == 50
        assert row["errors"] == 0, row
        assert row["achieved_rps"] > 0
    fifo = next(r for r in rows if r["target"] == "fifo")
    assert fifo["cpu_ms_per_request"] > 0
    assert isinstance(fifo["added_ttft_p50_ms"], float)
    assert doc["redis_roundtrips_per_request"] > 0
    pids = doc["meta"]["pids"]
    assert len(pids) == 3  # simulator, Valkey, gateway
    assert not [pid for pid in pids if procstat.alive(pid)]


def test_help_lists_the_flags(capsys: object) -> None:
    import argparse

    from loadtests.overhead.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--rates", "100,500", "--targets", "direct,litellm", "--generator-cpus", "0"])
    assert args.rates == [100.0, 500.0]
    assert args.targets == ["direct", "litellm"]
    assert args.generator_cpus == [0]
