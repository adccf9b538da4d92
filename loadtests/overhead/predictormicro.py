"""What the length predictor costs per request on real prompts, two trees side by side.

``python -m loadtests.overhead.predictormicro --data-dir ../shared/data --before DIR`` runs
``predict`` then ``observe`` for each of ``--prompts`` prompts of each of ShareGPT, GSM8K
and HumanEval (every other one with a ``max_tokens``) on a fresh predictor with the
shipped warm start, in this tree and in ``DIR`` (another checkout, e.g. a ``git worktree``),
each in a process of its own with a fixed hash seed, in alternating rounds. It reports
the CPU microseconds per request of each (median and best of ``--rounds``), and a digest
of what each learned and predicted: the same digest says a change left the model alone.

CPU time on a shared two-core machine moves by 10-20% between rounds, more than most
changes to the predictor. ``--instructions`` counts instructions instead, under
valgrind's callgrind, which gives the same count run after run whatever else the machine
does: each tree runs once with one pass over the prompts and once with two, and the
difference, divided by the prompts, is one request's instructions (start-up and the warm
start's load cancel out). About a minute per tree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FILES = ("sharegpt_v3_first_turn.part01.jsonl", "gsm8k.part01.jsonl", "humaneval.jsonl")
ROOT = Path(__file__).resolve().parents[2]


def read_prompts(data_dir: Path, per_file: int) -> list[tuple[str, int]]:
    """(prompt, true output tokens) of the first ``per_file`` rows of each file."""
    rows: list[tuple[str, int]] = []
    for name in FILES:
        with (data_dir / name).open() as lines:
            for _, line in zip(range(per_file), lines, strict=False):
                row = json.loads(line)
                rows.append((row["prompt"], int(row.get("response_tokens_cl100k") or row.get("response_tokens_est") or 1)))
    return rows


def work(root: Path, data_dir: Path, per_file: int, passes: int, digest: bool = True) -> dict[str, Any]:
    """Run in the tree at ``root`` (first on the path): ``passes`` passes of predict then
    observe over the prompts; CPU seconds of each pass and (``digest``) a digest of the outcome.
    The digest writes every learned sum as text, whose cost grows with how many sums the
    passes changed: a counted run leaves it out, so that it does not enter the difference
    between one pass and two."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
    from scheduler.predictor.warm_start import BUILTIN
    from scheduler.types import PredictInput

    inputs = [(PredictInput(model="m", tenant="t", prompt=p, prompt_chars=len(p), max_tokens=1024 if i % 2 else None), y)
              for i, (p, y) in enumerate(read_prompts(data_dir, per_file))]  # fmt: skip
    predictor = LengthPredictor(PredictorConfig(warm_start=BUILTIN))
    predicted, seconds = [], []
    for _ in range(passes):
        start = time.process_time()
        for inp, tokens in inputs:
            predicted.append(predictor.predict(inp).tokens)
            predictor.observe(inp, tokens)
        seconds.append(time.process_time() - start)
    if not digest:
        return {"requests": len(inputs), "seconds": seconds, "digest": None}
    learned = sorted(predictor.snapshot().items())
    digested = hashlib.sha1(json.dumps([learned, predicted]).encode()).hexdigest()[:12]
    return {"requests": len(inputs), "seconds": seconds, "digest": digested}


def _worker(root: Path, data_dir: Path, per_file: int, passes: int, valgrind: Path | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "loadtests.overhead.predictormicro", "--worker", str(root), "--data-dir", str(data_dir),
           "--prompts", str(per_file), "--passes", str(passes)]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # feature order, and so sums, the same in every run
    if valgrind is None:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, env=env).stdout
        return json.loads(out.splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        counts = Path(tmp) / "callgrind.out"
        cmd = [str(valgrind), "--tool=callgrind", f"--callgrind-out-file={counts}", *cmd, "--no-digest"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, env=env).stdout
        return {**json.loads(out.splitlines()[-1]), "instructions": instructions(counts.read_text())}


def instructions(callgrind_out: str) -> int:
    """The instructions a callgrind output file counts: its ``totals:`` or ``summary:`` line
    (a dump taken by ``callgrind_control -d`` writes ``summary: 0`` before its totals)."""
    counts = [int(line.split()[1]) for line in callgrind_out.splitlines() if line.startswith(("summary:", "totals:"))]
    if not counts:
        raise ValueError("no summary line in the callgrind output")
    return max(counts)


def compare(trees: dict[str, Path], data_dir: Path, per_file: int, rounds: int, count: bool) -> dict[str, Any]:
    """Each tree's CPU µs per request (median, best), digest and, with ``count``, instructions per request."""
    valgrind = shutil.which("valgrind") if count else None
    if count and valgrind is None:
        raise SystemExit("--instructions needs valgrind (Debian's package valgrind)")
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    digests: dict[str, str] = {}
    for _ in range(rounds):  # alternating, so drift on the machine falls on both
        for name, root in trees.items():
            run = _worker(root, data_dir, per_file, 1)
            cpu[name].append(run["seconds"][0] / run["requests"] * 1e6)
            digests[name] = run["digest"]
    result: dict[str, Any] = {}
    for name, root in trees.items():
        result[name] = {"cpu_us_median": statistics.median(cpu[name]), "cpu_us_best": min(cpu[name]),
                        "digest": digests[name]}  # fmt: skip
        if valgrind is not None:
            one, two = (_worker(root, data_dir, per_file, passes, Path(valgrind)) for passes in (1, 2))
            result[name]["instructions"] = (two["instructions"] - one["instructions"]) // one["requests"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.overhead.predictormicro", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="the folder of the shared data files")
    parser.add_argument("--before", type=Path, help="another checkout, measured beside this one")
    parser.add_argument("--prompts", type=int, default=300, help="prompts read from each of the three files")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per tree")
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind as well")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--passes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--no-digest", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    missing = [name for name in FILES if not (args.data_dir / name).is_file()]
    if missing:
        print(f"missing in {args.data_dir}: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.worker is not None:
        print(json.dumps(work(args.worker, args.data_dir, args.prompts, args.passes, digest=not args.no_digest)))
        return 0
    trees = {"this": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    result = compare(trees, args.data_dir.resolve(), args.prompts, args.rounds, args.instructions)
    for name, figures in result.items():
        count = f", {figures['instructions']:,} instructions" if "instructions" in figures else ""
        print(f"{name:>6} ({trees[name]}): CPU µs/request median {figures['cpu_us_median']:.1f}, "
              f"best {figures['cpu_us_best']:.1f}{count}; learned state {figures['digest']}")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
