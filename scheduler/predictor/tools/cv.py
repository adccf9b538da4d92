"""Hold-out cross-validation of the fine-tuned predictor inside ShareGPT part01.

    python -m scheduler.predictor.tools.cv --data-dir DIR [--seed 0] [--train-label mean]
        [--finetune-set epochs=3 precision=bf16 ...] [--out FILE]
    python -m scheduler.predictor.tools.cv --data-dir DIR --average RUN.jsonl [RUN.jsonl ...]

How the fine-tuned predictor's settings were chosen (``docs/benchmarks/predictor.md``)
without looking at ShareGPT part03: part01 is shuffled with seed 0 and its first 20%
is held out; the model trains on the other 80% plus AlpacaEval, GSM8K (capped for the
encoder, as in the eval command) and HumanEval, and is scored on the held-out rows
after every epoch, alone and blended with the lexical model at several weights. Each
epoch's held-out log estimates go to ``--out`` (JSON lines), so runs can be averaged
afterwards without training again: ``--average`` scores the ensemble of the last
epoch of each file given (what loading their weights together would predict). Needs
the ``embed`` extra, except for ``--average``.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

import orjson

from scheduler.predictor.embed import EmbeddingUnavailable
from scheduler.predictor.finetune import FinetunedLengthPredictor
from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.predictor.ranking import kendall_tau_b
from scheduler.predictor.tools.evaluate import (
    add_finetune_arguments,
    examples,
    finetune_config,
    load_rows,
    relabel,
    to_input,
    train,
)

_OTHERS = ("alpaca_eval_multi_model_lengths.jsonl", "gsm8k.part01.jsonl", "gsm8k.part02.jsonl", "humaneval.jsonl")
_WEIGHTS = (0.5, 0.6, 0.7, 0.8, 1.0)  # share of the fine-tuned model in the blend


def split(rows: list[dict], held_share: float = 0.2, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows) of one shuffled split."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    cut = int(len(rows) * held_share)
    return [rows[i] for i in order[cut:]], [rows[i] for i in order[:cut]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.predictor.tools.cv", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="the folder of the shared data files")
    parser.add_argument("--seed", type=int, default=0, help="the fine-tuning seed (the split is always seed 0)")
    parser.add_argument("--train-label", choices=("mean", "primary"), default="mean")
    add_finetune_arguments(parser)
    parser.add_argument("--out", type=Path, help="JSON lines: each epoch's held-out log estimates")
    parser.add_argument(
        "--average", nargs="+", type=Path, help="score the mean of these runs' last epochs (no training)"
    )
    args = parser.parse_args(argv)

    fit_rows, held = split(load_rows(args.data_dir / "sharegpt_v3_first_turn.part01.jsonl"))
    actual = [int(r["response_tokens_cl100k"]) for r in held]
    if args.average:
        return _average(args.average, actual)
    for name in _OTHERS:
        fit_rows += load_rows(args.data_dir / name)
    relabel(fit_rows, args.train_label)

    lexical = LengthPredictor(PredictorConfig(name="cv"))
    train(lexical, fit_rows, 3, 0, "source")
    lexical_logs = [math.log(lexical.predict(to_input(r, "source")).tokens) for r in held]
    print(f"held-out rows {len(held)}; lexical alone tau-b {kendall_tau_b(lexical_logs, actual):.4f}", flush=True)

    config = finetune_config(args.finetune_cap, args.finetune_set, args.seed)
    started = time.perf_counter()

    def after_epoch(epoch: int, predictor: FinetunedLengthPredictor) -> None:
        logs = predictor.predict_logs([to_input(r, "source") for r in held])
        shown = _by_weight(logs, lexical_logs, actual)
        print(f"epoch {epoch} ({time.perf_counter() - started:.0f} s) tau-b by weight {shown}", flush=True)
        if args.out is not None:
            with args.out.open("ab") as f:
                f.write(orjson.dumps({"seed": args.seed, "epoch": epoch, "logs": logs, "lexical": lexical_logs}))
                f.write(b"\n")

    try:
        FinetunedLengthPredictor(config).fit(examples(fit_rows, "source"), after_epoch)
    except EmbeddingUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


def _average(paths: list[Path], actual: list[int]) -> int:
    """Prints the tau of the mean of each run's last-epoch logs, alone and blended."""
    runs = []
    for path in paths:
        records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        if not records or len(records[-1]["logs"]) != len(actual):
            print(f"{path}: no run of this split", file=sys.stderr)
            return 2
        runs.append(records[-1])
        print(f"{path}: seed {records[-1]['seed']} epoch {records[-1]['epoch']} alone "
              f"{kendall_tau_b(records[-1]['logs'], actual):.4f}")
    mean = [sum(values) / len(values) for values in zip(*(run["logs"] for run in runs), strict=True)]
    print(f"mean of {len(runs)}: tau-b by weight {_by_weight(mean, runs[0]['lexical'], actual)}")
    return 0


def _by_weight(logs: list[float], lexical: list[float], actual: list[int]) -> str:
    """``w:tau`` for each blend weight ``w`` of the fine-tuned logs (the rest lexical)."""
    taus = (
        kendall_tau_b([w * z + (1 - w) * x for z, x in zip(logs, lexical, strict=True)], actual) for w in _WEIGHTS
    )
    return " ".join(f"{w}:{t:.4f}" for w, t in zip(_WEIGHTS, taus, strict=True))


if __name__ == "__main__":
    sys.exit(main())
