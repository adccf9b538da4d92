"""The command line: one clear line for config errors; `serve` on embedded defaults."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.server.embedded import free_port
from tests.support import ROOT

TRIAGE = [sys.executable, "-m", "triage"]


def child_pids(parent: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            pids.append(int(stat.parent.name))
    return pids


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("TRIAGE_CONFIG", None)
    return subprocess.run([*TRIAGE, *args], capture_output=True, text=True, timeout=60, env=full_env)


@pytest.mark.parametrize(
    ("yaml_text", "names"),
    [
        ("polcy: fifo\n", "polcy"),
        ("policy: random\n", "policy"),
        ("backends:\n  - name: a\n    url: ftp://x\n", "backends.0.url"),
        ("backends:\n  - name: a\n    url: http://127.0.0.1:1\n    max_concurrency: 0\n", "max_concurrency"),
        ("redis_url: redis://127.0.0.1:1/0\n", "redis_url"),
        ("- just\n- a list\n", "mapping"),
        ("key: [unclosed\n", "YAML"),
    ],
)
def test_config_errors_are_one_line(tmp_path: Path, yaml_text: str, names: str) -> None:
    config = tmp_path / "triage.yaml"
    config.write_text(yaml_text)
    result = run_cli("serve", "--config", str(config), "--port", str(free_port()))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("triage: config error:")
    assert names in lines[0]
    assert "Traceback" not in result.stderr


def test_env_overrides_and_missing_file(tmp_path: Path) -> None:
    result = run_cli("serve", "--config", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "missing.yaml" in result.stderr
    result = run_cli("serve", env={"TRIAGE_MAX_QUEUE": "-1"})
    assert result.returncode == 2 and "max_queue" in result.stderr


def test_serve_on_embedded_defaults_and_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "TRIAGE_SIMULATOR_PROFILE": "fast", "PYTHONUNBUFFERED": "1"}
    env.pop("TRIAGE_CONFIG", None)
    env.pop("REDIS_URL", None)
    log = (tmp_path / "out.log").open("w+")
    proc = subprocess.Popen([*TRIAGE, "serve", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        ready = False
        while time.monotonic() < deadline and proc.poll() is None and not ready:
            try:
                ready = httpx.get(f"{base}/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                time.sleep(0.2)
        assert ready, Path(log.name).read_text()
        resp = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
            timeout=30,
        )
        assert resp.status_code == 200
        children = child_pids(proc.pid)
        assert len(children) == 2  # the embedded Valkey and the simulated backend
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    output = Path(log.name).read_text()
    assert "embedded Redis-protocol server" in output and "simulated backend" in output
    assert "curl" in output and "from openai import OpenAI" in output
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_the_example_config_is_valid() -> None:
    from gateway.settings import load_settings

    example = ROOT / "deploy" / "triage.example.yaml"
    settings = load_settings(example)
    assert [b.name for b in settings.backends] == ["gpu-a", "gpu-b"]
    assert settings.api_keys[0].tenant == "acme"
