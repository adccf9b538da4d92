"""``triage engine llamacpp``: a real llama.cpp ``llama-server`` on loopback, serving the tiny
random-weight Llama as GGUF.

    triage engine llamacpp [--model-dir DIR] [--seed N] [--port P] [--parallel N]
        [--ctx-size N] [--build-only]

Builds the model (once per folder), starts the server, prints its URL and model name,
and runs until Ctrl-C or SIGTERM, then stops the server's process group.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loadtests.engines.cli import serve_until_stopped
from loadtests.engines.llamacpp import LlamaSpec, build_model, find, running_llamacpp
from loadtests.engines.vllm import CORPUS, EngineUnavailable

DEFAULT_MODEL_DIR = Path.home() / ".cache" / "triage" / "tiny-gguf"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="triage engine llamacpp", description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", type=Path, default=None, help=f"default {DEFAULT_MODEL_DIR}-seed<N>")
    p.add_argument("--seed", type=int, default=0, help="of the random weights")
    p.add_argument("--corpus", type=Path, default=CORPUS, help="prompts the tokenizer is trained on")
    p.add_argument("--port", type=int, default=0, help="default: a free one")
    p.add_argument("--parallel", type=int, default=8, help="slots (requests decoded at once)")
    p.add_argument("--ctx-size", type=int, default=8 * 16384, help="the whole context, shared by the slots")
    p.add_argument("--build-only", action="store_true", help="write the model file and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    model_dir = args.model_dir or Path(f"{DEFAULT_MODEL_DIR}-seed{args.seed}")
    try:
        engine = find()
        print(f"llama-server at {engine.server}", flush=True)
        model = build_model(engine, model_dir, args.seed, args.corpus)
        print(f"model: {model}", flush=True)
        if args.build_only:
            return 0
        spec = LlamaSpec(model=model, port=args.port, parallel=args.parallel, ctx_size=args.ctx_size, seed=args.seed)
        with running_llamacpp(spec, engine) as server:
            return serve_until_stopped(server, "llama-server")
    except EngineUnavailable as exc:
        print(f"triage engine llamacpp: {exc}", file=sys.stderr)
        return 2
    return 0
