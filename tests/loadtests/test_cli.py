"""The load tools' command line: flags into typed settings, and each mistake as exit
status 2 with one line (no server started)."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.arrivals import Process
from loadtests.cli import (
    add_compare_arguments,
    add_length_table_arguments,
    add_loadtest_arguments,
    load_config,
    run_compare,
    run_length_table,
)
from loadtests.options import UsageError


@pytest.fixture
def own_signals() -> Iterator[None]:
    """``compare`` installs its SIGINT and SIGTERM handlers; give the test process its own back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def parse(add: object, *flags: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add(p)  # type: ignore[operator]
    return p.parse_args(list(flags))


def test_urls_are_base_urls_and_the_arrivals_follow_the_workload() -> None:
    cfg = load_config(parse(add_loadtest_arguments, "--url", "http://127.0.0.1:9/v1/", "--url", "http://h:8/"))
    assert cfg.target.urls == ("http://127.0.0.1:9", "http://h:8")
    assert cfg.arrivals.process is Process.POISSON
    trace = load_config(parse(add_loadtest_arguments, "--url", "http://h:8", "--workload", "azure-conv"))
    assert trace.arrivals.process is Process.TRACE  # a trace workload replays its own times by default
    with pytest.raises(UsageError, match="--time-scale"):
        load_config(parse(add_loadtest_arguments, "--url", "http://h:8", "--time-scale", "0"))


def test_a_length_table_only_for_a_workload_that_hides_lengths(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(add_length_table_arguments, "--workload", "mixed", "--out", str(tmp_path / "t.jsonl"))
    assert run_length_table(args) == 2
    assert "sends its lengths" in capsys.readouterr().err
    assert not (tmp_path / "t.jsonl").exists()


@pytest.mark.usefixtures("own_signals")
def test_compare_reports_a_problem_as_one_line_and_status_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert run_compare(parse(add_compare_arguments, "--loads", "0.5,x", "--quiet")) == 2
    assert capsys.readouterr().err.startswith("compare: --loads")
    # the engine comparison's own error reaches the same handler
    monkeypatch.setenv("TRIAGE_VLLM_PYTHON", str(tmp_path / "no-python"))
    args = parse(add_compare_arguments, "--engine", "vllm", "--out", str(tmp_path / "out"), "--quiet")
    assert run_compare(args) == 2
    assert "compare: no vLLM Python at $TRIAGE_VLLM_PYTHON=" in capsys.readouterr().err
