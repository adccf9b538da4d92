"""The processes a comparison needs: Redis, simulated backends, one gateway per mode.

Every child listens on 127.0.0.1 only, logs to a file, and is stopped by its PID
(SIGINT, then SIGKILL after a grace period). Readiness is the child's own answer:
``/health`` for a simulator, ``/ready`` for a gateway.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gateway.server.embedded import await_http_ready, free_port, stop_child


class StackError(Exception):
    """A child process that did not come up, as one line."""


class Child:
    """One child process with its log file; ``stop()`` is safe to call twice."""

    def __init__(self, name: str, cmd: list[str], url: str, log: Path) -> None:
        self.name = name
        self.url = url
        self._cmd = cmd
        self._log_path = log
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, ready_path: str, timeout_s: float = 30.0) -> str:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("ab") as log:
            # the child's settings are its command line and config file, not this shell's TRIAGE_*
            env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
            self._proc = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env)
        if await_http_ready(self._proc, self.url + ready_path, timeout_s):
            return self.url
        code = self._proc.poll()
        self.stop()
        if code is not None:
            raise StackError(f"{self.name} exited with code {code}; see {self._log_path}")
        raise StackError(f"{self.name} was not ready on {self.url}{ready_path} within {timeout_s:.0f} s; "
                         f"see {self._log_path}")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self, grace_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        stop_child(proc, grace_s)


@dataclass(frozen=True, slots=True)
class SimSpec:
    profile: str = "llama-8b-h100"
    model: str = "sim-model"
    max_num_seqs: int = 8
    time_scale: float = 1.0
    length_table: Path | None = None  # true lengths of prompts sent without them (--length-table)


def simulator(spec: SimSpec, index: int, logs: Path) -> Child:
    port = free_port()
    cmd = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", str(port),
           "--profile", spec.profile, "--model", spec.model, "--max-num-seqs", str(spec.max_num_seqs),
           "--time-scale", str(spec.time_scale), "--seed", str(index)]
    if spec.length_table is not None:
        cmd += ["--length-table", str(spec.length_table)]
    return Child(f"simulator {index}", cmd, f"http://127.0.0.1:{port}", logs / f"simulator-{index}.log")


def gateway_config(redis_url: str, key_prefix: str, policy: str, backends: list[str], model: str,
                   max_concurrency: int, port: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        **(extra or {}),
        "host": "127.0.0.1",
        "port": port,
        "redis_url": redis_url,
        "key_prefix": key_prefix,
        "policy": policy,
        "allow_oracle": policy == "oracle",
        "backends": [{"name": f"sim{i}", "url": url, "models": [model], "max_concurrency": max_concurrency}
                     for i, url in enumerate(backends)],
    }


def gateway(config: dict[str, Any], name: str, workdir: Path) -> Child:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    cmd = [sys.executable, "-m", "triage", "serve", "--config", str(path)]
    return Child(f"gateway {name}", cmd, f"http://127.0.0.1:{config['port']}", workdir / f"{name}.log")
