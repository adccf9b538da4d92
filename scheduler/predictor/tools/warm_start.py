"""``triage predictor warm-start``: build the shipped warm start, and measure day one.

    python -m scheduler.predictor.tools.warm_start build [--data DIR] [--out FILE]
    python -m scheduler.predictor.tools.warm_start evaluate [--data DIR] [--warm FILE] [--json]

``build`` replays ``observe()`` over the public prompt -> length files of ``--data``
(``shared/data``: ShareGPT first turns, AlpacaEval, GSM8K, HumanEval) and writes the
lexical model's sums to ``scheduler/predictor/data/warm_start.json.gz`` (see
:mod:`scheduler.predictor.warm_start`). Rows of the held-out set never train it.

``evaluate`` scores, on the held-out prompts, a predictor that has learned nothing
(the 250-token prior) against one loaded with the warm start, on day one (no
online learning) and after ``--teach`` requests of online learning from a disjoint
slice of the held-out chat prompts, so the warm start is seen to go on learning.
Reported: Kendall's tau-b and class accuracy (short <= 256 < medium <= 1024 < long).

The held-out set: ShareGPT ``part03`` plus every ShareGPT ``part01`` row whose id
hashes (CRC-32) to 0 mod 5, and GSM8K ``part02``.
"""

from __future__ import annotations

import argparse
import random
import sys
import zlib
from pathlib import Path

import orjson

from scheduler.predictor import warm_start
from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.predictor.tools.evaluate import evaluate, load_rows, relabel, train

DEFAULT_DATA = Path("../shared/data")  # from the repository root
EPOCHS = 3
SEED = 0
MIN_G = 0.05  # features rarer than this offline are left out (see warm_start.prune)
TENANT = "one"  # one tenant: a new install knows nothing of where a prompt comes from


def _held_out_chat(row: dict) -> bool:
    return zlib.crc32(str(row.get("id", row["prompt"])).encode()) % 5 == 0


def split(data: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """(training rows, held-out chat rows, held-out math rows) of the data folder."""
    sharegpt = load_rows(data / "sharegpt_v3_first_turn.part01.jsonl")
    chat_train = [r for r in sharegpt if not _held_out_chat(r)]
    chat_held = [r for r in sharegpt if _held_out_chat(r)]
    chat_held += load_rows(data / "sharegpt_v3_first_turn.part03.jsonl")
    training = chat_train + load_rows(data / "alpaca_eval_multi_model_lengths.jsonl")
    training += load_rows(data / "gsm8k.part01.jsonl") + load_rows(data / "humaneval.jsonl")
    relabel(training, "mean")  # AlpacaEval rows teach the geometric mean of 13 generators
    math_held = load_rows(data / "gsm8k.part02.jsonl")
    return training, chat_held, math_held


def build(data: Path, out: Path) -> dict:
    """Train on the training rows and write the warm start; returns a summary."""
    training, _, _ = split(data)
    predictor = LengthPredictor(PredictorConfig(name="warm-start"))
    train(predictor, training, EPOCHS, SEED, TENANT)
    fields = warm_start.dump(warm_start.prune(predictor.snapshot(), MIN_G), out)
    return {"rows": len(training), "epochs": EPOCHS, "min_g": MIN_G, "fields": fields, "bytes": out.stat().st_size}


def _score(predictor: LengthPredictor, rows: list[dict]) -> dict:
    result = evaluate(predictor, rows, TENANT)
    return {k: result[k] for k in ("n", "kendall_tau", "class_accuracy", "mae_log", "confusion")}


def measure(data: Path, warm: Path, teach: int) -> dict:
    """Day-one and taught figures, without and with the warm start."""
    _, chat, math_rows = split(data)
    rng = random.Random(SEED)
    rng.shuffle(chat)
    teach_rows, scored = chat[:teach], chat[teach:]
    figures: dict = {"teach": len(teach_rows), "scored_chat": len(scored), "scored_math": len(math_rows)}
    for name, path in (("cold", None), ("warm", warm)):
        predictor = LengthPredictor(PredictorConfig(name=f"eval-{name}", warm_start=path))
        figures[name] = {"day_one_chat": _score(predictor, scored), "day_one_math": _score(predictor, math_rows)}
        train(predictor, teach_rows, 1, SEED, TENANT)
        figures[name]["taught_chat"] = _score(predictor, scored)
    return figures


def _print(figures: dict) -> None:
    print(f"held-out chat prompts scored: {figures['scored_chat']}; online teaching: {figures['teach']} "
          f"chat requests; held-out math prompts: {figures['scored_math']}")
    print(f"{'':<28} {'tau-b':>7} {'class_acc':>9}")
    for name in ("cold", "warm"):
        for stage, label in (("day_one_chat", "day one, chat"), ("taught_chat", "after teaching, chat"),
                             ("day_one_math", "day one, math")):
            r = figures[name][stage]
            print(f"{name + ' ' + label:<28} {r['kendall_tau']:>7.3f} {r['class_accuracy']:>9.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triage predictor warm-start", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="train on the public data and write the warm start")
    b.add_argument("--data", type=Path, default=DEFAULT_DATA)
    b.add_argument("--out", type=Path, default=warm_start.BUILTIN)
    e = sub.add_parser("evaluate", help="day-one tau and class accuracy, without and with the warm start")
    e.add_argument("--data", type=Path, default=DEFAULT_DATA)
    e.add_argument("--warm", type=Path, default=warm_start.BUILTIN)
    e.add_argument("--teach", type=int, default=400)
    e.add_argument("--json", action="store_true", help="print every figure as one JSON object")
    args = parser.parse_args(argv)
    if not (args.data / "sharegpt_v3_first_turn.part01.jsonl").exists():
        print(f"no prompt -> length data in {args.data} (give --data)", file=sys.stderr)
        return 2
    if args.command == "build":
        print(orjson.dumps(build(args.data, args.out)).decode())
        return 0
    figures = measure(args.data, args.warm, args.teach)
    if args.json:
        print(orjson.dumps(figures).decode())
    else:
        _print(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
