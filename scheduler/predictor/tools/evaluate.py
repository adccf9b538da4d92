"""``triage predictor eval``: train the length predictor on files, score it on another.

    python -m scheduler.predictor.tools.evaluate --train A.jsonl B.jsonl --data C.jsonl [--json]
        [--predictor lexical|embed|finetune] [--embed-cache FILE]
        [--finetune-cap TENANT=N ...] [--finetune-set KEY=VALUE ...]
        [--finetune-save FILE | --finetune-load FILE [FILE ...]]

Input rows are the prompt -> length JSONL of ``shared/data`` (fields ``prompt`` and
``response_tokens_cl100k``; ``source`` names the dataset). Training replays
``observe()`` over the training rows, shuffled with a fixed seed, for ``--epochs``
passes; evaluation calls ``predict()`` on each row of ``--data`` and never learns
from it. Reported: Kendall's tau-b and Spearman between predicted and actual
tokens, mean absolute error of log tokens, short/medium/long accuracy with its
confusion matrix (``ClassThresholds`` defaults), and prediction latency. The
baseline row is batch ridge regression on TF-IDF word 1-2 grams
(:mod:`scheduler.predictor.tools.baseline`).

``--predictor embed`` scores :class:`~scheduler.predictor.embed.EmbeddingLengthPredictor`
(needs the ``embed`` extra). Training prompts are encoded in batches first (and kept in
``--embed-cache`` when given); the evaluation rows are encoded one at a time inside
``predict()``, as a live request would be, so the latency includes the encoder.

``--predictor finetune`` scores :class:`~scheduler.predictor.finetune.FinetunedLengthPredictor`
(same extra): the lexical model is trained by the same replay, then MiniLM is fine-tuned
once on the training rows (each row once per fine-tuning epoch; ``--finetune-cap``
subsamples a tenant, GSM8K to 1,000 rows by default). ``--finetune-save`` keeps the
fine-tuned weights; ``--finetune-load`` reuses them instead of fine-tuning (to time
``predict()`` alone, say); several files load as one ensemble (networks fine-tuned with
different ``--seed`` values, e.g. in parallel). Evaluation rows go through ``predict()``
one at a time.

``--tenant source`` (the default) gives each dataset family its own tenant, as
distinct applications behind one gateway would be; ``--tenant one`` puts every row
in a single tenant, so nothing tells the model where a prompt comes from.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from scheduler.predictor.embed import (
    EmbedConfig,
    EmbeddingLengthPredictor,
    EmbeddingUnavailable,
)  # torch loads on first use
from scheduler.predictor.finetune import FinetuneConfig, FinetunedLengthPredictor  # torch: lazily
from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.predictor.ranking import kendall_tau_b, spearman
from scheduler.predictor.tools.baseline import TfidfRidge
from scheduler.types import ClassThresholds, LengthClass, PredictInput, Predictor

_CLASSES = (LengthClass.SHORT, LengthClass.MEDIUM, LengthClass.LONG)


# Metrics.


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def score(predicted: Sequence[float], actual: Sequence[int], thresholds: ClassThresholds) -> dict:
    """Every accuracy figure of one predictor on one data set."""
    confusion = {a.value: {p.value: 0 for p in _CLASSES} for a in _CLASSES}
    for p, a in zip(predicted, actual, strict=True):
        confusion[thresholds.classify(a).value][thresholds.classify(p).value] += 1
    hits = sum(confusion[c.value][c.value] for c in _CLASSES)
    mae = sum(
        abs(math.log(max(1.0, p)) - math.log(max(1, a))) for p, a in zip(predicted, actual, strict=True)
    )
    return {
        "n": len(actual),
        "kendall_tau": kendall_tau_b(predicted, actual) or 0.0,
        "spearman": spearman(predicted, actual),
        "mae_log": mae / len(actual),
        "class_accuracy": hits / len(actual),
        "confusion": confusion,  # actual class -> predicted class -> count
    }


# Data.


def load_rows(path: Path) -> list[dict]:
    """Rows with a prompt and a length: ``response_tokens_cl100k`` (the data sets) or
    ``output_tokens`` (a traffic log), kept as ``response_tokens_cl100k``."""
    rows = []
    with path.open("rb") as f:
        for line in f:
            if line.strip():
                row = orjson.loads(line)
                if row.get("response_tokens_cl100k") is None and row.get("output_tokens") is not None:
                    row["response_tokens_cl100k"] = row["output_tokens"]
                if row.get("response_tokens_cl100k") is not None:
                    rows.append(row)
    return rows


def train_label(row: dict, mode: str) -> int:
    """The length a training row teaches. ``mean``: a row that carries the lengths of
    several generators (AlpacaEval's ``response_tokens_cl100k_by_model``) teaches their
    geometric mean - what the prompt asks for, with less of one sample's noise;
    ``primary``: the row's own ``response_tokens_cl100k``. Scored rows always keep theirs."""
    by_model = row.get("response_tokens_cl100k_by_model") or {}
    lengths = [int(v) for v in by_model.values() if v]
    if mode != "mean" or len(lengths) < 2:
        return int(row["response_tokens_cl100k"])
    return max(1, round(math.exp(sum(math.log(max(1, v)) for v in lengths) / len(lengths))))


def to_input(row: dict, tenant_mode: str) -> PredictInput:
    """``--tenant source``: the row's ``tenant`` if it has one, else its dataset family."""
    prompt = row["prompt"]
    if tenant_mode != "source":
        tenant = "eval"
    else:
        tenant = str(row.get("tenant") or str(row.get("source", "")).split("/")[0])
    return PredictInput(model="default", tenant=tenant, prompt=prompt, prompt_chars=len(prompt))


# Runs.


def examples(rows: list[dict], tenant_mode: str) -> list[tuple[PredictInput, int]]:
    """(input, output tokens) for each row."""
    return [(to_input(r, tenant_mode), int(r["response_tokens_cl100k"])) for r in rows]


def relabel(rows: list[dict], mode: str) -> None:
    """Set each training row's length to the one it teaches (:func:`train_label`)."""
    for row in rows:
        row["response_tokens_cl100k"] = train_label(row, mode)


def train(predictor: Predictor, rows: list[dict], epochs: int, seed: int, tenant_mode: str) -> None:
    """Replay observe() over the rows, shuffled each epoch: mixed traffic, not file order."""
    inputs = examples(rows, tenant_mode)
    rng = random.Random(seed)
    for _ in range(epochs):
        rng.shuffle(inputs)
        for inp, tokens in inputs:
            predictor.observe(inp, tokens)


def evaluate(predictor: Predictor, rows: list[dict], tenant_mode: str) -> dict:
    thresholds = ClassThresholds()
    predicted: list[float] = []
    latencies: list[float] = []
    for row in rows:
        inp = to_input(row, tenant_mode)
        start = time.perf_counter_ns()
        prediction = predictor.predict(inp)
        latencies.append((time.perf_counter_ns() - start) / 1e6)
        predicted.append(prediction.tokens)
    result = score(predicted, [int(r["response_tokens_cl100k"]) for r in rows], thresholds)
    result["p50_ms"] = _percentile(latencies, 0.50)
    result["p99_ms"] = _percentile(latencies, 0.99)
    return result


def baseline(train_rows: list[dict], rows: list[dict]) -> dict:
    model = TfidfRidge().fit(
        [r["prompt"] for r in train_rows], [r["response_tokens_cl100k"] for r in train_rows]
    )
    predicted = [math.exp(model.predict_log(r["prompt"])) for r in rows]
    return score(predicted, [int(r["response_tokens_cl100k"]) for r in rows], ClassThresholds())


def _embed_predictor(
    train_rows: list[dict], tenant_mode: str, cache: Path | None
) -> EmbeddingLengthPredictor:
    """The embedding predictor with every training prompt encoded up front, in batches."""
    # Unbounded here: every training prompt is replayed each epoch, and a cache file may
    # hold other files' prompts too. Cleared before the evaluation rows are predicted.
    config = EmbedConfig(lexical=PredictorConfig(name="eval"), cache_size=1 << 30)
    predictor = EmbeddingLengthPredictor(config)
    if cache is not None and cache.exists():
        predictor.load_cache(cache)
    started = time.perf_counter()
    encoded = predictor.warm_cache(to_input(r, tenant_mode) for r in train_rows)
    print(f"encoded {encoded} training prompts in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if cache is not None and encoded:
        predictor.save_cache(cache)
    return predictor


def _finetune_predictor(
    train_rows: list[dict], tenant_mode: str, args: argparse.Namespace
) -> tuple[FinetunedLengthPredictor, float]:
    """The fine-tuned predictor's encoder, fitted (or loaded); returns it and the seconds spent."""
    predictor = FinetunedLengthPredictor(finetune_config(args.finetune_cap, args.finetune_set, args.seed))
    started = time.perf_counter()
    if args.finetune_load:
        predictor.load(*args.finetune_load)
        print(f"loaded the fine-tuned encoder from {' '.join(map(str, args.finetune_load))}", file=sys.stderr)
        return predictor, 0.0
    report = predictor.fit(examples(train_rows, tenant_mode))
    print(
        f"fine-tuned on {report.rows} rows x {report.epochs} epochs in {report.seconds:.0f} s",
        file=sys.stderr,
    )
    if args.finetune_save is not None:
        predictor.save(args.finetune_save)
    return predictor, time.perf_counter() - started


# FinetuneConfig fields --finetune-set may change (the others have flags of their own).
_SETTABLE = tuple(f.name for f in dataclasses.fields(FinetuneConfig) if f.name not in ("lexical", "tenant_caps", "seed"))
_DEFAULT_CAPS = ("gsm8k=1000",)  # GSM8K is off-domain and large: 1,000 rows for the encoder


def finetune_config(caps: Sequence[str], settings: Sequence[str], seed: int) -> FinetuneConfig:
    """The fine-tuned predictor's config from ``TENANT=N`` caps and ``KEY=VALUE`` settings,
    each value converted to its field's type; a bad pair exits with a one-line message."""
    tenant_caps = tuple((tenant, int(n)) for tenant, _, n in (c.partition("=") for c in caps))
    config = FinetuneConfig(lexical=PredictorConfig(name="eval"), tenant_caps=tenant_caps, seed=seed)
    changes: dict[str, object] = {}
    for pair in settings:
        key, sep, value = pair.partition("=")
        if not sep or key not in _SETTABLE:
            raise SystemExit(f"--finetune-set: expected KEY=VALUE with KEY one of {', '.join(_SETTABLE)}")
        kind = type(getattr(config, key))
        try:
            changes[key] = kind(value)
        except ValueError:
            raise SystemExit(f"--finetune-set: {key} needs a {kind.__name__}, got {value!r}") from None
    try:
        return dataclasses.replace(config, **changes)
    except ValueError as exc:
        raise SystemExit(f"--finetune-set: {exc}") from None


def add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    """The fine-tuning flags every predictor command shares."""
    parser.add_argument(
        "--finetune-cap",
        nargs="*",
        default=list(_DEFAULT_CAPS),
        metavar="TENANT=N",
        help="rows of a tenant the encoder is fine-tuned on (default gsm8k=1000)",
    )
    parser.add_argument(
        "--finetune-set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="any other FinetuneConfig setting, e.g. members=3 epochs=3 precision=bf16",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="triage predictor eval", description=__doc__.split("\n")[0])
    parser.add_argument("--train", nargs="+", type=Path, required=True, help="JSONL files to learn from")
    parser.add_argument("--data", type=Path, required=True, help="JSONL file to score on (never learned)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of every figure")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tenant", choices=("source", "one"), default="source")
    parser.add_argument(
        "--train-label",
        choices=("mean", "primary"),
        default="mean",
        help="rows with several generators' lengths teach their geometric mean (default) or their own",
    )
    parser.add_argument("--limit", type=int, default=0, help="use only the first N rows of each file")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--save-warm-start", type=Path, help="write the trained state as a JSON warm start")
    parser.add_argument("--predictor", choices=("lexical", "embed", "finetune"), default="lexical")
    parser.add_argument("--embed-cache", type=Path, help="embeddings of training prompts, read and updated")
    add_finetune_arguments(parser)
    parser.add_argument("--finetune-save", type=Path, help="write the fine-tuned encoder here")
    parser.add_argument(
        "--finetune-load",
        nargs="+",
        type=Path,
        help="load fine-tuned encoders instead of fitting (several files: one ensemble)",
    )
    return parser


def _table(name: str, r: dict) -> str:
    latency = f"{r['p50_ms']:.3f} / {r['p99_ms']:.3f}" if "p50_ms" in r else "-"
    return (
        f"{name:<22} {r['kendall_tau']:>7.3f} {r['spearman']:>8.3f} {r['mae_log']:>8.3f} "
        f"{r['class_accuracy']:>9.3f}   {latency}"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    train_rows: list[dict] = []
    for path in args.train:
        loaded = load_rows(path)
        train_rows.extend(loaded[: args.limit] if args.limit else loaded)
    relabel(train_rows, args.train_label)  # the scored rows are loaded apart and keep their own lengths
    rows = load_rows(args.data)
    rows = rows[: args.limit] if args.limit else rows
    if not train_rows or len(rows) < 2:
        print("need training rows and at least two data rows", file=sys.stderr)
        return 2

    finetune: FinetunedLengthPredictor | None = None
    finetune_s = 0.0
    try:
        embed = (
            _embed_predictor(train_rows, args.tenant, args.embed_cache) if args.predictor == "embed" else None
        )
        if args.predictor == "finetune":
            finetune, finetune_s = _finetune_predictor(train_rows, args.tenant, args)
    except EmbeddingUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    wrapper = embed or finetune
    lexical = wrapper.lexical if wrapper is not None else LengthPredictor(PredictorConfig(name="eval"))
    predictor: Predictor = wrapper if wrapper is not None else lexical
    started = time.perf_counter()
    # The fine-tuned encoder has learned already: replay only into its lexical model.
    train(lexical if finetune is not None else predictor, train_rows, args.epochs, args.seed, args.tenant)
    trained_s = time.perf_counter() - started
    if embed is not None:
        embed.clear_cache()  # evaluation rows are encoded inside predict(), and timed
    result = evaluate(predictor, rows, args.tenant)
    result.update(
        train_rows=len(train_rows), epochs=args.epochs, tenant=args.tenant, train_s=trained_s,
        train_label=args.train_label,
    )
    if finetune is not None:
        result["finetune_s"] = finetune_s
        # The fine-tuned encoder on its own (no lexical blend), batched and not timed.
        logs = finetune.predict_logs([to_input(r, args.tenant) for r in rows])
        actual = [int(r["response_tokens_cl100k"]) for r in rows]
        result["encoder_alone"] = score([math.exp(v) for v in logs], actual, ClassThresholds())
    result["predictor"] = args.predictor
    if not args.no_baseline:
        result["baseline"] = baseline(train_rows, rows)
    if args.save_warm_start:
        args.save_warm_start.write_bytes(orjson.dumps(lexical.snapshot()))

    print(f"train rows {len(train_rows)} x {args.epochs} epochs in {trained_s:.1f} s; data rows {len(rows)}")
    if finetune is not None:
        print(f"encoder fine-tuned in {finetune_s:.0f} s")
    print(f"{'':<22} {'tau-b':>7} {'spearman':>8} {'mae_log':>8} {'class_acc':>9}   p50 / p99 ms")
    print(_table(f"online {args.predictor}", result))
    if "encoder_alone" in result:
        print(_table("fine-tuned alone", result["encoder_alone"]))
    if "baseline" in result:
        print(_table("tfidf ridge baseline", result["baseline"]))
    print("confusion (rows actual, columns predicted: short medium long):")
    for actual, predicted in result["confusion"].items():
        print(f"  {actual:<7}" + "".join(f"{count:>7}" for count in predicted.values()))
    if args.json:
        print(orjson.dumps(result).decode())
    return 0


def finetune_main(argv: list[str] | None = None) -> int:
    """``triage predictor finetune``: fine-tune the encoder on files and save it for the
    gateway's ``predictor: finetuned`` (``predictor_weights``)."""
    parser = argparse.ArgumentParser(
        prog="triage predictor finetune", description="fine-tune the length encoder and save its weights"
    )
    parser.add_argument("--train", nargs="+", type=Path, required=True, help="JSONL files to learn from")
    parser.add_argument("--save", type=Path, required=True, help="where the weights go (predictor_weights)")
    parser.add_argument(
        "--seed", type=int, default=0, help="fine-tuning seed; files of several seeds, listed together, are an ensemble"
    )
    parser.add_argument("--tenant", choices=("source", "one"), default="source")
    add_finetune_arguments(parser)
    args = parser.parse_args(argv)
    rows = [row for path in args.train for row in load_rows(path)]
    if not rows:
        print("no training rows (each needs prompt and response_tokens_cl100k or output_tokens)", file=sys.stderr)
        return 2
    relabel(rows, "mean")
    predictor = FinetunedLengthPredictor(finetune_config(args.finetune_cap, args.finetune_set, args.seed))
    try:
        report = predictor.fit(examples(rows, args.tenant))
    except EmbeddingUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    predictor.save(args.save)
    print(f"fine-tuned on {report.rows} rows x {report.epochs} epochs in {report.seconds:.0f} s")
    print(f"saved to {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
