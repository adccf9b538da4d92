"""The open-loop generator's summary and its process (``worker``), without a target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.overhead import worker
from loadtests.overhead.httpclient import Exchange
from loadtests.overhead.openloop import LoadSpec, summarize
from loadtests.overhead.steps import Workload, run_worker

MS = 1_000_000


def exchange(index: int, sent_ms: int, first_ms: int, end_ms: int, tokens: int = 10, error: str = "") -> Exchange:
    ex = Exchange(index, due_ns=sent_ms * MS - MS, keep_gaps=True, keep_body=False)  # each sent 1 ms late
    ex.sent_ns, ex.first_ns, ex.end_ns, ex.tokens, ex.error = sent_ms * MS, first_ms * MS, end_ms * MS, tokens, error
    ex.gaps = [2 * MS] * (tokens - 1)
    return ex


def test_the_warm_up_is_sent_but_not_measured_and_failures_are_counted_apart() -> None:
    spec = LoadSpec("127.0.0.1", 1, "/v1/chat/completions", b"{}", rate=100.0, duration_s=1.0)
    finished = [exchange(0, 0, 500, 900, tokens=999),  # warm-up: slow, and left out
                exchange(1, 10, 15, 30), exchange(2, 20, 24, 40),
                exchange(3, 30, 0, 31, tokens=0, error="http_503")]
    out = summarize(finished, 1, spec, {"unsent": 0})
    assert (out["requests"], out["ok"], out["errors"], out["error_kinds"]) == (3, 2, 1, {"http_503": 1})
    assert out["ttft_ms"]["p50"] == 4.5 and out["e2e_ms"]["max"] == 20.0  # the successes only
    assert out["tokens_mean"] == 10.0
    assert out["lateness_ms"]["p50"] == 1.0  # sent minus due, failures included
    assert out["send_rps"] == 100.0 and out["unsent"] == 0


def test_the_body_asks_for_exactly_the_tokens_wanted() -> None:
    body = json.loads(Workload(max_tokens=50).body(stream=True, max_tokens=2000))
    assert body["max_tokens"] == 2000 and body["ignore_eos"] is True and body["stream"] is True
    assert json.loads(Workload().body(stream=False))["max_tokens"] == 50


def test_a_worker_that_fails_is_an_error_row_not_an_exception(tmp_path: Path) -> None:
    result = run_worker("nonsense", {"body": ""}, [], tmp_path / "w", timeout_s=60)
    assert result["worker_error"].startswith("generator exited with code 1")
    assert "unknown kind 'nonsense'" in (tmp_path / "w" / "worker.log").read_text()


def test_the_worker_refuses_an_unknown_kind(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"kind": "closedloop", "spec": {"body": ""}}))
    with pytest.raises(ValueError, match="unknown kind"):
        worker.main([str(spec), str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()
