"""The ``triage`` command in process: its subcommands, the config file named by flag or
by ``TRIAGE_CONFIG``, a config error as one line and status 2, and ``python -m triage``."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from triage.cli import build_parser, main


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    out = capsys.readouterr().out
    assert caught.value.code == 0 and out.startswith("usage: triage")
    for command in ("serve", "sim", "loadtest", "bench", "predictor", "engine"):
        assert command in out


def test_serve_flags_are_parsed_without_the_load_tools() -> None:
    args = build_parser("serve").parse_args(["serve", "--port", "9001", "--policy", "fifo", "--workers", "2"])
    assert (args.command, args.port, args.policy, args.workers, args.config) == ("serve", 9001, "fifo", 2, None)


def test_a_bad_policy_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["serve", "--policy", "random"])
    assert caught.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_a_config_error_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "triage.yaml"
    config.write_text("policy: nope\n")
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("triage: config error:") and "policy" in err[0]


def test_the_config_file_may_come_from_triage_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "absent.yaml"
    monkeypatch.setenv("TRIAGE_CONFIG", str(missing))
    assert main(["serve"]) == 2
    assert str(missing) in capsys.readouterr().err


def test_python_m_triage_is_the_same_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["triage", "--help"])
    with pytest.raises(SystemExit) as caught:
        runpy.run_module("triage.__main__", run_name="__main__")
    assert caught.value.code == 0 and capsys.readouterr().out.startswith("usage: triage")


def test_logging_leaves_out_a_line_per_upstream_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx logs every request it sends at INFO; the gateway's own logs say what a request
    did, so the command keeps those lines out and still shows httpx's warnings."""
    import logging

    from triage.cli import configure_logging

    for name in ("httpx", "httpcore"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    configure_logging()
    for name in ("httpx", "httpcore"):
        log = logging.getLogger(name)
        assert not log.isEnabledFor(logging.INFO) and log.isEnabledFor(logging.WARNING)
