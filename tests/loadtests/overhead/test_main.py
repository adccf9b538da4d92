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
