"""``triage engine vllm``: a real vLLM on loopback, serving the tiny random-weight Llama.

    triage engine vllm [--model-dir DIR] [--seed N] [--port P] [--max-num-seqs N]
        [--max-num-queued-reqs N] [--scheduling-policy fcfs|priority] [--build-only]

Builds the model (once per folder), starts the server, prints its URL and model name,
and runs until Ctrl-C or SIGTERM, then stops the server's process group.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Protocol

from loadtests.engines.vllm import (
    CORPUS,
    EngineUnavailable,
    VllmSpec,
    build_model,
    find_python,
    running_vllm,
    vllm_version,
)

DEFAULT_MODEL_DIR = Path.home() / ".cache" / "triage" / "tiny-llama"


class Served(Protocol):
    url: str
    model: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    started_s: float


def serve_until_stopped(server: Served, name: str) -> int:
    """Say where ``server`` listens and wait for Ctrl-C or SIGTERM (0), or for it to exit (1)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"serving {server.model} at {server.url} (up in {server.started_s:.1f} s; "
          f"log {server.log_path}); Ctrl-C stops it", flush=True)
    while not stop.wait(1.0):
        if server.proc.poll() is not None:
            print(f"{name} exited with status {server.proc.returncode}", file=sys.stderr)
            return 1
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="triage engine vllm", description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", type=Path, default=None, help=f"default {DEFAULT_MODEL_DIR}-seed<N>")
    p.add_argument("--seed", type=int, default=0, help="of the random weights")
    p.add_argument("--corpus", type=Path, default=CORPUS, help="prompts the tokenizer is trained on")
    p.add_argument("--port", type=int, default=0, help="default: a free one")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--max-num-queued-reqs", type=int, default=None)
    p.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--build-only", action="store_true", help="write the model folder and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    model_dir = args.model_dir or Path(f"{DEFAULT_MODEL_DIR}-seed{args.seed}")
    try:
        python = find_python()
        print(f"vLLM {vllm_version(python)} at {python}", flush=True)
        build_model(python, model_dir, args.seed, args.corpus)
        print(f"model: {model_dir}", flush=True)
        if args.build_only:
            return 0
        spec = VllmSpec(
            model_dir=model_dir, port=args.port, max_num_seqs=args.max_num_seqs,
            max_num_queued_reqs=args.max_num_queued_reqs, scheduling_policy=args.scheduling_policy,
            max_model_len=args.max_model_len,
        )  # fmt: skip
        with running_vllm(spec, python) as server:
            return serve_until_stopped(server, "vLLM")
    except EngineUnavailable as exc:
        print(f"triage engine vllm: {exc}", file=sys.stderr)
        return 2
    return 0
