"""The command line: flags to settings, and ``python -m simulator`` serving."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import httpx
import pytest

from simulator.faults import FaultSettings
from simulator.profiles import BatchingMode
from simulator.server import add_arguments, settings_from_args
from simulator.settings import SimSettings


def parse(*argv: str) -> SimSettings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return settings_from_args(parser.parse_args(argv))


def test_defaults_match_sim_settings() -> None:
    assert parse() == SimSettings()
    assert SimSettings().model == "sim-model" and SimSettings().profile == "llama-8b-h100"


def test_overrides_reach_the_profile() -> None:
    s = parse(
        "--profile", "fast", "--max-num-seqs", "3", "--mode", "static", "--seed", "7", "--fail-rate", "0.25"
    )
    profile = s.resolve_profile()
    assert (profile.name, profile.max_num_seqs, profile.mode, profile.seed) == (
        "fast",
        3,
        BatchingMode.STATIC,
        7,
    )
    assert s.faults == FaultSettings(fail_rate=0.25)


def test_length_table_flag() -> None:
    assert parse("--length-table", "lengths.jsonl").length_table == "lengths.jsonl"


def test_prefix_caching_flags() -> None:
    assert parse().resolve_profile().prefix_caching is True
    assert SimSettings(profile="instant").resolve_profile().prefix_caching is False
    s = parse("--no-prefix-caching", "--block-size", "32")
    assert (s.prefix_caching, s.block_size) == (False, 32)
    assert (s.resolve_profile().prefix_caching, s.resolve_profile().block_size) == (False, 32)
    assert parse("--enable-prefix-caching", "--profile", "instant").resolve_profile().prefix_caching is True
    assert parse("--no-enable-prefix-caching").prefix_caching is False  # vLLM's spelling


def test_time_scale_scales_step_durations() -> None:
    base = SimSettings(profile="llama-8b-h100").resolve_profile()
    fast = SimSettings(profile="llama-8b-h100", time_scale=0.1).resolve_profile()
    assert fast.step_seconds(8, 1000, 100) == pytest.approx(base.step_seconds(8, 1000, 100) * 0.1)


def test_python_m_simulator_serves() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        sys.executable,
        "-m",
        "simulator",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--profile",
        "fast",
    ]
    argv += ["--model", "cli-model", "--max-num-seqs", "2", "--mode", "continuous"]
    proc = subprocess.Popen(argv)
    try:
        # A subprocess offers nothing to wait on, so poll /health, bounded (a cold start of
        # Python and its imports on a busy machine can take many seconds).
        deadline = time.monotonic() + 60
        ready = False
        while not ready and time.monotonic() < deadline and proc.poll() is None:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
            except httpx.TransportError:
                time.sleep(0.05)
        assert ready, "the simulator did not come up"
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()
        assert models["data"][0]["id"] == "cli-model"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
