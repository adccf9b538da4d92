"""What being pausable costs llama.cpp: the fields a stream that may be paused asks for,
measured alone (``python -m loadtests.engines.field_cost``).

A stream the gateway may pause on a ``resume: llamacpp`` backend asks llama-server for
each sampled token's id (``engines.IDS_ASK``: ``n_probs`` with ``post_sampling_probs``)
and for its running count (``timings_per_token``), and the server writes them on every
chunk. This puts ``streams`` streamed chat requests of ``tokens`` tokens each through
llama-server at once, with no field (``plain``), each field alone, and both (``pausable``,
what the gateway sends), in rounds that alternate the variants' order, and reports each
variant's wall time over ``plain``'s of the same round, with the engine's own counters
(tokens predicted, seconds it spent predicting them). The engine runs on ``--engine-cpus``
(its HTTP threads too, as in ``bench compare --engine llamacpp --engine-cpus``), this
client on the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from loadtests.engines import llamacpp
from loadtests.engines.under_test import keep_apart, on_cpus
from scheduler.backends.engines import IDS_ASK
from scheduler.types import ResumeMode

TIMINGS = {"timings_per_token": True}
VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "ids": dict(IDS_ASK[ResumeMode.LLAMACPP]),
    "timings": TIMINGS,
    "pausable": {**IDS_ASK[ResumeMode.LLAMACPP], **TIMINGS},
}
PREDICTED = "llamacpp:tokens_predicted_total"
PREDICTED_S = "llamacpp:tokens_predicted_seconds_total"


def body(variant: str, i: int, tokens: int, model: str = llamacpp.MODEL_NAME) -> dict[str, Any]:
    """The ``i``-th stream's request in ``variant``: greedy, exactly ``tokens`` tokens."""
    return {
        "model": model, "messages": [{"role": "user", "content": f"Tell a story about the number {i}."}],
        "stream": True, "max_tokens": tokens, "ignore_eos": True, "temperature": 0, **VARIANTS[variant],
    }


def orders(variants: list[str], rounds: int) -> list[list[str]]:
    """Each round's order: forwards, then backwards, so no variant always runs first."""
    return [variants if r % 2 == 0 else variants[::-1] for r in range(rounds)]


async def _stream(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> int:
    size = 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=payload) as response:
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            size += len(chunk)
    return size


async def _round(server: llamacpp.LlamaServer, variant: str, streams: int, tokens: int) -> dict[str, float]:
    before = server.metrics()
    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=600) as client:
        sizes = await asyncio.gather(*(_stream(client, server.url, body(variant, i, tokens)) for i in range(streams)))
    wall = time.perf_counter() - start
    after = server.metrics()
    made = after[PREDICTED] - before[PREDICTED]
    return {"wall_s": wall, "tokens": made, "engine_s": after.get(PREDICTED_S, 0.0) - before.get(PREDICTED_S, 0.0),
            "bytes_per_token": sum(sizes) / made if made else 0.0}


def summary(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each variant's wall time over ``plain``'s of the same round: median and worst."""
    out: dict[str, dict[str, float]] = {}
    for variant in rounds[0]:
        ratios = [r[variant]["wall_s"] / r["plain"]["wall_s"] for r in rounds]
        out[variant] = {"median": statistics.median(ratios), "worst": max(ratios), "best": min(ratios),
                        "bytes_per_token": statistics.median(r[variant]["bytes_per_token"] for r in rounds)}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m loadtests.engines.field_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8, help="measured rounds (one more, first, warms up)")
    ap.add_argument("--streams", type=int, default=8, help="streams at once (the server gets as many slots)")
    ap.add_argument("--tokens", type=int, default=400, help="tokens a stream")
    ap.add_argument("--engine-cpus", default="0", help="CPUs for llama-server, comma-separated")
    ap.add_argument("--out", type=Path, default=Path("field-cost"), help="folder: the model, the log, the JSON")
    args = ap.parse_args(argv)
    cpus = {int(c) for c in args.engine_cpus.split(",") if c}
    args.out.mkdir(parents=True, exist_ok=True)
    engine = llamacpp.find()
    model = llamacpp.build_model(engine, args.out / "model")
    load_before = os.getloadavg()
    spec = llamacpp.LlamaSpec(model=model, parallel=args.streams)
    keep_apart(cpus)  # this client off the engine's CPUs; the server started on them
    with ExitStack() as stack:
        server = on_cpus(cpus, lambda: stack.enter_context(
            llamacpp.running_llamacpp(spec, engine, args.out / "llama-server.log")))
        rounds: list[dict[str, dict[str, float]]] = []
        for n, order in enumerate(orders(list(VARIANTS), args.rounds + 1)):
            measured = {v: asyncio.run(_round(server, v, args.streams, args.tokens)) for v in order}
            if n:
                rounds.append(measured)
                print(n, "  ".join(f"{v} {m['wall_s']:.2f}s" for v, m in measured.items()), flush=True)
    result = {"streams": args.streams, "tokens": args.tokens, "engine_cpus": sorted(cpus),
              "engine": llamacpp.version(engine), "load_average": {"before": load_before, "after": os.getloadavg()},
              "rounds": rounds, "summary": summary(rounds)}
    (args.out / "field-cost.json").write_text(json.dumps(result, indent=1))
    for variant, s in result["summary"].items():
        print(f"{variant:9} wall / plain: median {s['median']:.3f}, range {s['best']:.3f}-{s['worst']:.3f}; "
              f"{s['bytes_per_token']:.0f} bytes a token")


if __name__ == "__main__":
    main()
