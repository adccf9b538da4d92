"""One measured step: one target, one offered rate (or one relay concurrency).

The generator runs as its own process (``worker``); around it the gateway's CPU
seconds (``/proc``) and its Redis server's command counts are read, so the step's
summary holds what the client saw and what it cost. CPU and Redis calls are divided
by every request sent in the step, warm-up included, since they were counted over it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtests.overhead import procstat, redisstats
from loadtests.overhead.targets import Target


@dataclass(frozen=True, slots=True)
class Workload:
    model: str = "sim-model"
    max_tokens: int = 50
    prompt: str = "Write a short note about the weather."

    def body(self, stream: bool, max_tokens: int | None = None) -> str:
        doc = {"model": self.model, "messages": [{"role": "user", "content": self.prompt}],
               "max_tokens": max_tokens or self.max_tokens, "ignore_eos": True, "stream": stream}
        return json.dumps(doc, separators=(",", ":"))


def run_worker(kind: str, spec: dict[str, Any], cpus: list[int], workdir: Path, timeout_s: float) -> dict[str, Any]:
    """Run the generator process once; its summary, or ``{"worker_error": ...}``."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = workdir / "worker-spec.json", workdir / "worker-out.json"
    out_path.unlink(missing_ok=True)
    spec_path.write_text(json.dumps({"kind": kind, "cpus": cpus, "spec": spec}), encoding="utf-8")
    with (workdir / "worker.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "loadtests.overhead.worker", str(spec_path),
                                 str(out_path)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return {"worker_error": f"generator ran past {timeout_s:.0f} s"}
    if code != 0 or not out_path.exists():
        return {"worker_error": f"generator exited with code {code}; see {workdir / 'worker.log'}"}
    result: dict[str, Any] = json.loads(out_path.read_text(encoding="utf-8"))
    return result


class Meter:
    """CPU seconds of a target's process tree and its Redis calls, between start() and stop()."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._cpu0 = 0.0
        self._calls0: Any = None

    def start(self) -> None:
        if self._target.child is not None:
            self._cpu0 = procstat.tree_cpu_seconds(self._target.child.pid)
        if self._target.redis_url:
            self._calls0 = redisstats.command_calls(self._target.redis_url)

    def stop(self, requests: int) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu_ms_per_request": None, "redis_commands_per_request": None}
        n = max(1, requests)
        if self._target.child is not None:
            cpu = procstat.tree_cpu_seconds(self._target.child.pid) - self._cpu0
            out.update(cpu_s=cpu, cpu_ms_per_request=1000.0 * cpu / n)
        if self._target.redis_url and self._calls0 is not None:
            calls = redisstats.delta(self._calls0, redisstats.command_calls(self._target.redis_url))
            out.update(redis_calls=calls, redis_commands_per_request=sum(calls.values()) / n)
        return out


@dataclass(frozen=True, slots=True)
class StepPlan:
    rate: float
    duration_s: float
    warmup_s: float
    drain_s: float
    stream: bool
    max_connections: int = 4000


def openloop_step(target: Target, plan: StepPlan, workload: Workload, cpus: list[int],
                  workdir: Path) -> dict[str, Any]:
    spec = {"host": "127.0.0.1", "port": target.port, "path": "/v1/chat/completions",
            "body": workload.body(plan.stream), **asdict(plan)}
    meter = Meter(target)
    meter.start()
    timeout = plan.warmup_s + plan.duration_s + plan.drain_s + 60
    result = run_worker("openloop", spec, cpus, workdir, timeout)
    result.update(meter.stop(int(result.get("sent_total", 0))))
    result.update(target=target.name, rps=plan.rate)
    return result


def relay_step(target: Target, concurrency: int, max_tokens: int, duration_s: float, workload: Workload,
               cpus: list[int], workdir: Path) -> dict[str, Any]:
    spec = {"host": "127.0.0.1", "port": target.port, "path": "/v1/chat/completions",
            "body": workload.body(True, max_tokens), "concurrency": concurrency,
            "duration_s": duration_s, "warmup_s": 1.0}
    meter = Meter(target)
    meter.start()
    result = run_worker("relay", spec, cpus, workdir, duration_s + 60)
    chunks = result.get("chunks_per_s", 0.0) * (duration_s + 1.0)
    result.update(meter.stop(1))
    if result.get("cpu_s") is not None and chunks:
        result["cpu_us_per_chunk"] = 1e6 * result["cpu_s"] / chunks
    result.update(target=target.name)
    return result


def roundtrip_step(target: Target, rate: float, duration_s: float, workload: Workload, cpus: list[int],
                   workdir: Path) -> dict[str, Any]:
    """Client-sent Redis commands per request, from a short MONITOR sample of its own."""
    assert target.redis_url is not None
    plan = StepPlan(rate, duration_s, 0.5, 10.0, True)
    spec = {"host": "127.0.0.1", "port": target.port, "path": "/v1/chat/completions",
            "body": workload.body(True), **asdict(plan)}
    monitor = redisstats.RoundTrips(target.redis_url)
    monitor.start()
    try:
        result = run_worker("openloop", spec, cpus, workdir, duration_s + 60)
    finally:
        commands = monitor.stop()
    sent = max(1, int(result.get("sent_total", 0)))
    return {"target": target.name, "rps": rate, "requests": sent, "errors": result.get("errors"),
            "commands": commands, "script_commands": dict(sorted(monitor.lua.items())),
            "roundtrips_per_request": sum(commands.values()) / sent,
            "script_commands_per_request": sum(monitor.lua.values()) / sent}
