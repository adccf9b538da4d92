"""The LiteLLM side-by-side's install: a pinned version in a cache folder; every way it is
left out comes with the reason."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from loadtests.overhead import litellm_env
from loadtests.overhead.cli import Run, add_arguments
from loadtests.overhead.targets import TargetError


def test_the_cache_folder_is_per_pinned_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    venv = litellm_env.default_venv()
    assert venv == tmp_path / "triage" / f"litellm-{litellm_env.LITELLM_VERSION}"
    assert not litellm_env.installed(venv)


def test_a_failed_install_says_which_step_failed(tmp_path: Path) -> None:
    with pytest.raises(litellm_env.InstallFailed, match="exited 1"):
        litellm_env.install(tmp_path / "venv", tmp_path / "install.log", python="false")


def test_without_the_flag_a_missing_litellm_is_left_out_with_the_way_to_get_it(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--litellm-venv", str(tmp_path / "none"), "--targets", "direct,litellm"])
    with pytest.raises(TargetError, match="run with --litellm"):
        Run(args, tmp_path)._litellm_venv()
