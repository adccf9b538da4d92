"""An engine's server process: spawned in a process group of its own, waited on until its
health check answers (bounded), and stopped by PID with the whole group.

A process group, not a session: with the kernel's session autogrouping (on by default), a
session of its own is a scheduling group of its own, and a group with one busy thread on a
core outweighs there a group whose threads are busy mostly on the other core. An engine
that spins a thread on a core (vLLM's CPU build binds one) then starves whatever of the
launcher's threads lands on that core: the tests' event loop stood still for seconds at a
time. In the launcher's session the engine's threads and the launcher's share each core
thread by thread."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx


class EngineUnavailable(Exception):
    """No engine to start here (not installed, or it cannot run), or it did not start."""


def run_writer(cmd: Sequence[str], what: str, timeout_s: float = 600.0) -> None:
    """Run a model writer under an engine's Python; ``EngineUnavailable`` with its stderr's
    tail when it fails."""
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise EngineUnavailable(f"building {what} failed: {done.stderr.strip()[-2000:]}")


def spawn_healthy(
    argv: Sequence[str], env: dict[str, str], log_path: Path, health_url: str, timeout_s: float, name: str,
    every_s: float = 0.5, append: bool = False,
) -> tuple[subprocess.Popen[bytes], float]:
    """Start ``argv`` (output to ``log_path``) and wait until ``health_url`` answers 200;
    returns the process and the seconds it took. ``EngineUnavailable`` (the log's tail
    included) when it exits first or does not answer within ``timeout_s``. ``append``: the
    log goes on after what an earlier start wrote."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with log_path.open("ab" if append else "wb") as log:
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, env=env, process_group=0)
    deadline = began + timeout_s
    with httpx.Client(timeout=5, trust_env=False) as client:
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise EngineUnavailable(f"{name} exited with status {proc.returncode} while starting:\n{tail}")
            try:
                if client.get(health_url).status_code == 200:
                    return proc, time.monotonic() - began
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                stop_group(proc)
                raise EngineUnavailable(f"{name} did not answer {health_url} within {timeout_s:.0f} s")
            time.sleep(every_s)  # nothing to block on while a child starts listening


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """Stop the server's process group by its PID: SIGTERM (the server shuts its workers
    down), then SIGKILL for whatever is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the engine's children, should they linger
    except ProcessLookupError:
        pass
    proc.wait()
