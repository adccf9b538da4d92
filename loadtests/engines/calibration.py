"""A simulator profile fitted to a real engine, and how far apart the two still are.

    python -m loadtests.engines.calibration measure --url URL --model M --words-from tokenizer.json \\
        --repeats 3 --json engine.json          # the grid, against the engine (or the simulator)
    python -m loadtests.engines.calibration fit engine.json       # the profile's timing numbers
    python -m loadtests.engines.calibration compare engine.json sim.json   # cell by cell, as ratios

The grid (``GRID``) has two kinds of cells (``timing.py``):

* *prefill* cells, one client, one output token, prompts of 64 to 2,048 tokens: TTFT
  against prompt length gives the prefill cost per token (the slope) and what a request
  costs before its first step (the intercept);
* *decode* cells, 1 to 8 clients with 256-token prompts and replies, and 8 clients with
  1,024-token prompts: output tokens per second give the step time at each batch size,
  and the longer prompts the cost per context token.

``fit`` reads the median over repeats of each cell and solves the profile's step model
(``simulator/profiles.py``) for them; ``compare`` puts the engine's and the simulator's
medians side by side with their ratio, and says for each whether it is within ±25%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from loadtests.engines.timing import Cell, measure, vocabulary_words

PREFILL = [Cell(1, p, 1, rounds=4) for p in (64, 512, 1024, 2048)]
DECODE = [Cell(c, 256, 256, rounds=3) for c in (1, 2, 4, 8)] + [Cell(8, 1024, 256, rounds=3)]
GRID = PREFILL + DECODE
WARMUP = Cell(8, 64, 64, rounds=2)
FIT_PROMPT_MAX = 1024
TOLERANCE = 0.25
# what each kind of cell is compared on
COMPARED = {"prefill": ("ttft_p50_ms",), "decode": ("output_tps", "e2e_ms", "ttft_p50_ms")}


async def measure_repeats(url: str, model: str, words: tuple[str, ...], repeats: int) -> list[list[dict[str, Any]]]:
    await measure(url, model, WARMUP, words)
    runs = []
    for r in range(repeats):
        runs.append([(await measure(url, model, cell, words, seed=r)).row() for cell in GRID])
        print(f"repeat {r + 1}/{repeats} done", file=sys.stderr, flush=True)
    return runs


def medians(runs: list[list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """cell name -> each figure's median over the repeats (and its worst: ``<figure>_range``)."""
    out: dict[str, dict[str, float]] = {}
    for cell in GRID:
        rows = [row for run in runs for row in run if row["cell"] == cell.name]
        figures = {}
        for key in ("ttft_ms", "ttft_p50_ms", "tpot_ms", "e2e_ms", "output_tps", "prompt_tokens_counted"):
            values = [float(r[key]) for r in rows]
            figures[key] = statistics.median(values)
            figures[key + "_min"], figures[key + "_max"] = min(values), max(values)
        out[cell.name] = figures
    return out


def fit(med: dict[str, dict[str, float]]) -> dict[str, float]:
    """The step model's numbers from the grid's medians (seconds)."""
    # prefill: TTFT = intercept + slope * prompt tokens, least squares over the prefill cells up
    # to FIT_PROMPT_MAX tokens (the workload's range; a CPU's attention grows faster than linearly
    # beyond, which the step model does not have: the 2,048-token cell shows how far)
    fitted = [c for c in PREFILL if c.prompt_tokens <= FIT_PROMPT_MAX]
    xs = [c.prompt_tokens for c in fitted]
    ys = [med[c.name]["ttft_p50_ms"] / 1000 for c in fitted]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    # decode: with n clients in step, each request takes the server's own time, O steps and,
    # as every step carries on average n / O prefills, n prompts' prefill; a step costs
    # base + per_seq * n + per_ctx * context, the context n * (P + O / 2) on average
    rows, ys = [], []
    for c in DECODE:
        per_request = c.concurrency * c.output_tokens / med[c.name]["output_tps"]
        step = (per_request - c.concurrency * slope * c.prompt_tokens) / c.output_tokens
        rows.append((1.0, float(c.concurrency), c.concurrency * (c.prompt_tokens + c.output_tokens / 2)))
        ys.append(step)
    base, per_seq, per_ctx = _least_squares(rows, ys)
    # one client's first token (the intercept): the server's own time, then one step with its prefill
    overhead = intercept - base - per_seq
    return {
        "step_base_s": round(max(base, 0.0), 6), "step_per_seq_s": round(max(per_seq, 0.0), 6),
        "step_per_ctx_token_s": round(per_ctx, 9), "prefill_per_token_s": round(max(slope, 0.0), 8),
        "request_overhead_s": round(max(overhead, 0.0), 5),
    }


def _least_squares(rows: list[tuple[float, ...]], ys: list[float]) -> list[float]:
    """Solve the normal equations of a small linear fit (Gauss-Jordan on k x k)."""
    k = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] + [sum(r[i] * y for r, y in zip(rows, ys, strict=True))]
         for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(k):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][k] / a[i][i] for i in range(k)]


def compare(engine: dict[str, dict[str, float]], sim: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    rows = []
    for cell in GRID:
        kind = "prefill" if cell in PREFILL else "decode"
        for key in COMPARED[kind]:
            e, s = engine[cell.name][key], sim[cell.name][key]
            ratio = s / e if e else float("nan")
            rows.append({"cell": cell.name, "figure": key, "engine": e,
                         "engine_range": (engine[cell.name][key + "_min"], engine[cell.name][key + "_max"]),
                         "simulator": s, "ratio": round(ratio, 3), "within": abs(ratio - 1) <= TOLERANCE})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| cell | figure | engine, median (range) | simulator | simulator / engine | within ±25% |",
             "|---|---|---:|---:|---:|:---:|"]
    for r in rows:
        lo, hi = r["engine_range"]
        lines.append(f"| {r['cell']} | {r['figure']} | {r['engine']:.1f} ({lo:.1f}–{hi:.1f}) | {r['simulator']:.1f} "
                     f"| {r['ratio']:.2f} | {'yes' if r['within'] else '**no**'} |")
    within = sum(r["within"] for r in rows)
    lines.append(f"\n{within} of {len(rows)} figures within ±25%.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtests.engines.calibration", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="run the grid against a server")
    m.add_argument("--url", required=True)
    m.add_argument("--model", required=True)
    m.add_argument("--words-from", type=Path, required=True, help="the tiny model's tokenizer.json")
    m.add_argument("--repeats", type=int, default=3)
    m.add_argument("--json", type=Path, required=True)
    f = sub.add_parser("fit", help="the profile's numbers from a grid")
    f.add_argument("grid", type=Path)
    c = sub.add_parser("compare", help="engine and simulator, cell by cell")
    c.add_argument("engine", type=Path)
    c.add_argument("simulator", type=Path)
    c.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.command == "measure":
        runs = asyncio.run(measure_repeats(args.url, args.model, vocabulary_words(args.words_from), args.repeats))
        args.json.write_text(json.dumps({"url": args.url, "model": args.model, "runs": runs,
                                         "medians": medians(runs)}, indent=1))
        return 0
    if args.command == "fit":
        print(json.dumps(fit(json.loads(args.grid.read_text())["medians"]), indent=1))
        return 0
    rows = compare(json.loads(args.engine.read_text())["medians"], json.loads(args.simulator.read_text())["medians"])
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
