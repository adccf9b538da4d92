"""A load test's outputs: one JSON row per request, and the Markdown summary's
undefined figures and failures (records built by hand, no server)."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests.client import RequestRecord, Target
from loadtests.metrics import Warmup, summarize
from loadtests.plan import LoadConfig
from loadtests.report import SCHEMA, markdown, record_json, report_json, write_records
from loadtests.timeseries import timeseries
from loadtests.workload import load_workload

RECORDS = [
    RequestRecord(2, "short", 0.2, False, 50, error="http_503", status=503),
    RequestRecord(0, "short", 0.0, True, 11, input_tokens=7, output_tokens=11, ttft_s=0.1, e2e_s=1.1,
                  itl_s=(0.1,) * 10),
    RequestRecord(1, "short", 0.1, True, 1, output_tokens=1, ttft_s=0.2, e2e_s=0.2),
]


def test_a_row_carries_tpot_instead_of_every_gap() -> None:
    row = record_json(RECORDS[1])
    assert "itl_s" not in row  # thousands of gaps per request stay out of requests.jsonl
    assert row["tpot_s"] == 0.1  # (1.1 - 0.1) / (11 - 1)
    assert record_json(RECORDS[2])["tpot_s"] is None  # one token: undefined, not zero


def test_rows_are_written_in_request_order(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "requests.jsonl"
    write_records(path, RECORDS)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert rows[2]["error"] == "http_503" and rows[2]["ok"] is False


def test_the_summary_shows_undefined_figures_as_dashes_and_lists_failures() -> None:
    workload = load_workload("synthetic")
    cfg = LoadConfig(Target(("http://127.0.0.1:1",), "m", stream=False), workload, warmup=Warmup())
    summary = summarize(RECORDS, {}, Warmup(), ["short"])
    text = markdown(cfg, summary)
    assert "not streaming" in text
    assert "Failures: http_503 1" in text
    # no SLO: goodput and attainment undefined; total TPS adds the input tokens
    assert "| short | 2 | 1 | 0 | 1.82 | 11 | 17 | - | - |" in text
    assert "| short | 150.0 | 150.0 | 190.0 | 199.0 |" in text  # TTFT in ms, failures left out
    doc = report_json(cfg, summary, timeseries(RECORDS), 1.23456, {"synthetic": "synthetic"})
    assert doc["schema"] == SCHEMA and doc["wall_s"] == 1.235
    assert doc["config"]["target"]["stream"] is False and doc["config"]["replay"]["path"] is None
