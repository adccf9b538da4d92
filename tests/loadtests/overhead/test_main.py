"""``python -m loadtests.overhead``: the module entry point hands its arguments to the
CLI and exits with its status."""

from __future__ import annotations

import runpy
import sys

import pytest


def _run(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int | str | None:
    monkeypatch.setattr(sys, "argv", ["python -m loadtests.overhead", *argv])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("loadtests.overhead.__main__", run_name="__main__")
    return exited.value.code


def test_help_lists_the_flags_and_exits_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(monkeypatch, "--help") == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m loadtests.overhead")
    assert "--rates" in out and "--smoke" in out and "--json" in out


def test_an_unknown_flag_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(monkeypatch, "--no-such-flag") == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_imported_it_runs_nothing() -> None:
    namespace = runpy.run_module("loadtests.overhead.__main__", run_name="not_main")
    assert callable(namespace["main"])  # the CLI's main, not called


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs two CPUs to pin apart")
def test_gateway_cpus_pin_a_gateway_onto_them_and_the_rest_off_them(tmp_path) -> None:
    """``--gateway-cpus 1``: a gateway's process (and its workers) on CPU 1, the simulator and
    Valkey on every other CPU."""
    import argparse
    import os
    import subprocess

    from loadtests.overhead.cli import Run, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cpus = sorted(os.sched_getaffinity(0))
    bench = Run(parser.parse_args(["--gateway-cpus", str(cpus[-1])]), tmp_path)
    gateway = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "30"])
    try:
        bench._pin(gateway.pid, gateway=True)
        bench._pin(other.pid, gateway=False)
        assert os.sched_getaffinity(gateway.pid) == {cpus[-1]}
        assert cpus[-1] not in os.sched_getaffinity(other.pid)
        unpinned = Run(parser.parse_args([]), tmp_path)
        before = os.sched_getaffinity(other.pid)
        unpinned._pin(other.pid, gateway=True)
        assert os.sched_getaffinity(other.pid) == before  # no flag: nothing pinned
    finally:
        for p in (gateway, other):
            p.kill()
            p.wait()
