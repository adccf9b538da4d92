"""``bench compare``: one seeded load through direct, FIFO, short-first and oracle, side by side.

It starts everything it needs (an embedded Redis, simulated backends, one gateway per
mode), measures the backends' capacity for the workload's mix, then for each load
(a fraction of that capacity) sends the same seeded requests at the same times
through each mode in turn. Nothing is tuned per mode; every mode sees the same trace.

A workload that hides lengths sends prompts only: the comparison writes every prompt's
true length into ``OUT/length_table.jsonl`` and starts its simulators with
``--length-table``, so each reply stops at its true length and a gateway learns lengths
only from the replies it relays. Only the oracle modes are sent the true length
(``x-triage-oracle-tokens``); the others are not.

Capacity: a closed-loop run that keeps every backend slot busy, directly against the
backends; capacity RPS = sustained output tokens/s / mean output tokens per request.
"""

from __future__ import annotations

import argparse
import signal
import sys
import uuid
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gateway import redis_client
from gateway.embedded import EmbeddedRedis, free_port
from gateway.settings import Settings
from loadtests.arrivals import ArrivalSpec, Process
from loadtests.client import RequestRecord, Target
from loadtests.compare_report import ratios, run_row, true_class
from loadtests.compare_view import print_tables, write_cdf_plot, write_markdown, write_plot
from loadtests.datasets import PromptCatalog
from loadtests.length_table import FILE_NAME, write_length_table
from loadtests.limit_trace import LimitSampler, write_limit_plot
from loadtests.metrics import Warmup, summarize
from loadtests.modes import DEFAULT_MODES, GATEWAY_MODES, MODES, mode_gateway_config, uses_oracle
from loadtests.pause_stats import pause_stats
from loadtests.plan import LoadConfig, TraceReplay, execute, trace_rows
from loadtests.progress import Progress
from loadtests.report import write_json, write_records
from loadtests.requests import Part, RequestFactory
from loadtests.runner import Limits, run_async
from loadtests.stack import Child, SimSpec, StackError, gateway, gateway_config, simulator
from loadtests.timeseries import timeseries
from loadtests.traces import TraceRow
from loadtests.workload import Lengths, Workload, load_workload
from scheduler.queue.keys import predictor_key

__all__ = ["DEFAULT_MODES", "GATEWAY_MODES", "MODES", "CompareConfig", "CompareError", "run"]


class CompareError(Exception):
    """A comparison that cannot run, as one line."""


@dataclass(frozen=True, slots=True)
class CompareConfig:
    workload: str
    loads: tuple[float, ...]
    modes: tuple[str, ...]
    sim: SimSpec
    backends: int
    duration_s: float
    drain_s: float
    warmup_s: float
    capacity_s: float
    capacity_rps: float | None  # given: skip the measurement
    seed: int
    data_dir: Path | None
    out: Path
    json_path: Path
    quiet: bool
    train_s: float = 0.0  # teach the gateways' predictor first, on other prompts (seed + 1)
    gateway_settings: dict[str, Any] = field(default_factory=dict)  # --gateway-set, every measured gateway


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--loads", default="0.7,0.9,1.1", help="fractions of capacity (default 0.7,0.9,1.1)")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES), help=f"subset of {','.join(MODES)}")
    p.add_argument("--duration", type=float, default=45.0, help="sending window per run, s (default 45)")
    p.add_argument("--drain", type=float, default=90.0, help="max wait for in-flight requests per run, s")
    p.add_argument("--warmup-s", type=float, default=5.0, help="exclude requests sent in the first T s")
    p.add_argument("--profile", default="llama-8b-h100", help="simulator profile (default llama-8b-h100)")
    p.add_argument("--model", default="sim-model")
    p.add_argument("--max-num-seqs", type=int, default=8, help="batch slots per backend (default 8)")
    p.add_argument("--backends", type=int, default=1, help="simulated backends (default 1)")
    p.add_argument("--sim-time-scale", type=float, default=1.0, help="simulator step-time multiplier")
    p.add_argument("--capacity-s", type=float, default=20.0, help="length of the capacity run, s")
    p.add_argument("--capacity", type=float, default=None, help="capacity in RPS: skip measuring it")
    p.add_argument("--out", default="compare-out", help="folder for compare.md, compare.png, logs")
    p.add_argument("--json", default=None, help="JSON report path (default OUT/compare.json)")
    p.add_argument("--train-s", type=float, default=60.0,
                   help="before the runs, teach the length predictor for this long on other prompts of the "
                        "same workload (its training part, one prompt in four, seed + 1), as a gateway in "
                        "service would have learned; 0: cold")
    p.add_argument("--gateway-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a gateway setting for every measured gateway (repeatable; the value is read as "
                        "YAML), e.g. --gateway-set long_share_max=0.75; the mode's own settings win")
    p.add_argument("--smoke", action="store_true",
                   help="tiny run for tests: fast profile, one load, a few seconds per mode")


def compare_config(args: argparse.Namespace) -> CompareConfig:
    from loadtests.options import UsageError, resolve_data_dir

    try:
        loads = tuple(float(x) for x in args.loads.split(",") if x.strip())
    except ValueError:
        raise UsageError("--loads: comma-separated numbers, e.g. 0.7,0.9,1.1") from None
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not loads or any(x <= 0 for x in loads):
        raise UsageError("--loads: at least one load, each > 0")
    if not modes or any(m not in MODES for m in modes):
        raise UsageError(f"--modes: a comma-separated subset of {','.join(MODES)}")
    if args.backends < 1 or args.max_num_seqs < 1 or args.duration <= 0:
        raise UsageError("--backends, --max-num-seqs and --duration must be positive")
    sim = SimSpec(args.profile, args.model, args.max_num_seqs, args.sim_time_scale)
    duration, drain, warmup, capacity_s = args.duration, args.drain, args.warmup_s, args.capacity_s
    train_s = args.train_s
    if args.smoke:
        loads, sim = loads[:1], SimSpec("fast", args.model, 4, 1.0)
        duration, drain, warmup, capacity_s, train_s = 3.0, 30.0, 0.0, 3.0, min(train_s, 2.0)
    out = Path(args.out)
    settings = gateway_settings(args.gateway_set)
    return CompareConfig(args.workload, loads, modes, sim, args.backends, duration, drain, warmup, capacity_s,
                         args.capacity, args.seed, resolve_data_dir(args.data_dir), out,
                         Path(args.json) if args.json else out / "compare.json", args.quiet, train_s, settings)


# Settings the comparison itself decides for each gateway it starts.
_OWN_SETTINGS = frozenset({"host", "port", "redis_url", "key_prefix", "policy", "allow_oracle", "backends"})


def gateway_settings(pairs: list[str]) -> dict[str, Any]:
    """``["long_share_max=0.75", ...]`` -> ``{"long_share_max": 0.75}`` (values read as YAML)."""
    from loadtests.options import UsageError

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--gateway-set {pair!r}: expected KEY=VALUE, e.g. long_share_max=0.75")
        if key in _OWN_SETTINGS:
            raise UsageError(f"--gateway-set {key}: set by the comparison itself for each mode")
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            raise UsageError(f"--gateway-set {key}: the value is not valid YAML") from None
    return out


def _log(cfg: CompareConfig, text: str) -> None:
    if not cfg.quiet:
        print(text, file=sys.stderr, flush=True)


def mean_output_tokens(workload: Workload, cfg: LoadConfig, catalog: PromptCatalog, n: int = 2000) -> float:
    """Mean planned output tokens of the workload's requests (its trace's, for a trace workload)."""
    if workload.trace is not None:
        rows = trace_rows(cfg) or []
        if not rows:
            raise CompareError("the workload's trace has no rows")
        return sum(r.output_tokens for r in rows) / len(rows)
    factory = RequestFactory(workload, catalog, cfg.seed, cfg.part)
    return sum(factory.next(i).max_tokens for i in range(n)) / n


async def _run(cfg: LoadConfig, catalog: PromptCatalog, label: str, quiet: bool) -> list[RequestRecord]:
    progress = Progress(label, cfg.limits.max_requests, cfg.limits.duration_s,
                        enabled=not quiet and sys.stderr.isatty())
    with progress:
        return (await execute(cfg, progress.record, catalog)).records


def measure_capacity(cfg: CompareConfig, base: LoadConfig, catalog: PromptCatalog,
                     urls: tuple[str, ...]) -> dict[str, Any]:
    mean_tokens = mean_output_tokens(base.workload, base, catalog)
    if cfg.capacity_rps is not None:
        return {"rps": cfg.capacity_rps, "measured": False, "mean_output_tokens": round(mean_tokens, 1)}
    clients = cfg.backends * cfg.sim.max_num_seqs + 2
    load = LoadConfig(Target(urls, cfg.sim.model, base.workload.api, oracle_header=False), base.workload,
                      ArrivalSpec(Process.CONCURRENCY, concurrency=clients),
                      Limits(cfg.capacity_s, None, cfg.drain_s), Warmup(), cfg.seed + 7, base.data_dir,
                      part=base.part)
    records = run_async(_run(load, catalog, "capacity", cfg.quiet))
    series = timeseries(records)
    # steady state: skip the first 30% (the batch filling up); stop at the end of sending
    window = [tps for t, tps in zip(series.t_s, series.output_tps, strict=True)
              if 0.3 * cfg.capacity_s <= t and t + series.bin_s <= cfg.capacity_s]
    if not window:
        raise CompareError("capacity run too short to measure; raise --capacity-s")
    tps = sum(window) / len(window)
    return {"rps": round(tps / mean_tokens, 4), "measured": True, "output_tps": round(tps, 1),
            "mean_output_tokens": round(mean_tokens, 1), "clients": clients}


def trace_scale(rows: list[TraceRow], rate: float, duration_s: float) -> float:
    """The time scale that puts ``rate * duration_s`` of the trace's first rows in the window.

    Scaling by the whole trace's mean rate would be wrong: traces are bursty per minute,
    so the replayed minutes can be much busier or quieter than the trace's average.
    """
    n = min(len(rows) - 1, max(1, round(rate * duration_s)))
    return duration_s / rows[n].t_s if rows[n].t_s > 0 else 1.0


def load_config(cfg: CompareConfig, workload: Workload, urls: tuple[str, ...], rate: float,
                rows: list[TraceRow] | None, part: Part = Part.MEASURE, oracle: bool = False) -> LoadConfig:
    """One run's load; ``oracle``: send the true length in ``x-triage-oracle-tokens``."""
    limits = Limits(cfg.duration_s, None, cfg.drain_s)
    target = Target(urls, cfg.sim.model, workload.api, oracle_header=oracle)
    if workload.trace is not None and rows:
        # the trace's own timing, sped up or slowed down to the wanted mean rate
        return LoadConfig(target, workload, ArrivalSpec(Process.TRACE), limits, Warmup(0, cfg.warmup_s),
                          cfg.seed, cfg.data_dir, TraceReplay(time_scale=trace_scale(rows, rate, cfg.duration_s)),
                          part)
    return LoadConfig(target, workload, ArrivalSpec(Process.POISSON, rate=rate), limits,
                      Warmup(0, cfg.warmup_s), cfg.seed, cfg.data_dir, part=part)


def copy_hash(redis_url: str, key: str) -> dict[bytes, bytes]:
    client = redis_client.sync_client(redis_url)
    try:
        return dict(client.hgetall(key))  # type: ignore[arg-type]
    finally:
        client.close()


def paste_hash(redis_url: str, key: str, fields: dict[bytes, bytes]) -> None:
    client = redis_client.sync_client(redis_url)
    try:
        client.hset(key, mapping=fields)  # type: ignore[arg-type]
    finally:
        client.close()


def _stop_on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds the ExitStack: every child is stopped


def hidden_lengths_table(cfg: CompareConfig, workload: Workload, catalog: PromptCatalog) -> Path | None:
    """For a workload that hides lengths: write every prompt's true length where the
    simulators will read it (``OUT/length_table.jsonl``); None for one that sends them."""
    if workload.lengths is not Lengths.HIDDEN:
        return None
    lengths = RequestFactory(workload, catalog, cfg.seed).true_lengths()
    return write_length_table((cfg.out / FILE_NAME).resolve(), lengths)


def run(args: argparse.Namespace) -> int:
    # Ctrl-C and SIGTERM stop the children too, even when started where SIGINT is ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _stop_on_term)
    cfg = compare_config(args)
    workload = load_workload(cfg.workload)
    catalog = PromptCatalog(cfg.data_dir)
    thresholds = (Settings.model_fields["short_max_tokens"].default,
                  Settings.model_fields["medium_max_tokens"].default)
    table = hidden_lengths_table(cfg, workload, catalog)
    cfg = replace(cfg, sim=replace(cfg.sim, length_table=table))
    logs = cfg.out / "logs"
    runs: list[dict[str, Any]] = []
    kept: dict[tuple[str, float], list[RequestRecord]] = {}
    with ExitStack() as stack:
        redis = EmbeddedRedis()
        redis_url = redis.start()
        stack.callback(redis.stop)
        sims: list[Child] = []
        for i in range(cfg.backends):
            sim = simulator(cfg.sim, i, logs)
            stack.callback(sim.stop)
            sims.append(sim)
            try:
                sim.start("/health")
            except StackError as exc:
                raise CompareError(str(exc)) from None
        direct = tuple(s.url for s in sims)
        base = load_config(cfg, workload, direct, 1.0, None)  # the measured part
        rows = trace_rows(base) if workload.trace else None
        capacity = measure_capacity(cfg, base, catalog, direct)
        trained = _train_predictor(cfg, workload, catalog, direct, redis_url, capacity["rps"], logs)
        _log(cfg, f"capacity: {capacity['rps']:.3f} req/s "
                  f"({capacity.get('output_tps', '-')} output tokens/s, {capacity['mean_output_tokens']} per request)")
        for load in cfg.loads:
            rate = load * capacity["rps"]
            for mode in cfg.modes:
                row, records = _one(cfg, workload, catalog, mode, load, rate, rows, direct, redis_url,
                                    thresholds, logs, trained)
                runs.append(row)
                kept[(mode, load)] = Warmup(0, cfg.warmup_s).measured(records)
                write_records(cfg.out / "runs" / f"{mode}-{load}.jsonl", records)
    report = {
        "schema": "triage.compare/1",
        "config": {"workload": workload.name, "workload_description": workload.description,
                   "lengths": workload.lengths.value, "length_table": str(table) if table else None,
                   "class_basis": "true output length", "loads": list(cfg.loads), "modes": list(cfg.modes),
                   "predictor_training_s": cfg.train_s, "gateway_settings": cfg.gateway_settings,
                   "profile": cfg.sim.profile, "max_num_seqs": cfg.sim.max_num_seqs, "backends": cfg.backends,
                   "sim_time_scale": cfg.sim.time_scale, "duration_s": cfg.duration_s, "drain_s": cfg.drain_s,
                   "warmup_s": cfg.warmup_s, "seed": cfg.seed, "class_thresholds": list(thresholds)},
        "capacity": capacity,
        "data_origin": catalog.origin,
        "runs": runs,
        "ratios": ratios(runs),
    }
    write_json(cfg.json_path, report)
    write_markdown(cfg.out / "compare.md", report)
    write_plot(cfg.out / "compare.png", report)
    short = {key: [r for r in records if true_class(r, thresholds) == "short"] for key, records in kept.items()}
    write_cdf_plot(cfg.out / "compare_cdf.png", short, f"short (true length <= {thresholds[0]})")
    trajectories = {f"{r['mode']} @ {r['load']}": r.get("limit_trajectory", []) for r in runs
                    if "_high" in r["mode"]}
    write_limit_plot(cfg.out / "limit.png", trajectories, f"concurrency limit, {workload.name}")
    if not cfg.quiet:
        print_tables(report)
    _log(cfg, f"wrote {cfg.json_path}; compare.md, compare.png, compare_cdf.png, runs/*.jsonl in {cfg.out}")
    return 0 if all(r["overall"]["count"] for r in runs) else 1


def _train_predictor(cfg: CompareConfig, workload: Workload, catalog: PromptCatalog, direct: tuple[str, ...],
                     redis_url: str, rate: float, logs: Path) -> dict[bytes, bytes]:
    """A gateway in service has learned from the traffic it saw. Teach one on other
    prompts of the same workload (its training part, seed + 1: never a measured
    prompt) and return its predictor state, which every measured gateway then starts
    from (a copy each)."""
    if cfg.train_s <= 0:
        return {}
    prefix = f"cmptrain{uuid.uuid4().hex[:8]}"
    conf = gateway_config(redis_url, prefix, "fifo", list(direct), cfg.sim.model, cfg.sim.max_num_seqs,
                          free_port(), {"predictor_sync_s": 1.0})
    child = gateway(conf, "gateway-train", logs)
    try:
        url = child.start("/ready")
        train = replace(cfg, seed=cfg.seed + 1, duration_s=cfg.train_s, warmup_s=0.0)
        records = run_async(_run(load_config(train, workload, (url,), rate, None, Part.TRAIN), catalog,
                                 "training", cfg.quiet))
    except StackError as exc:
        raise CompareError(str(exc)) from None
    finally:
        child.stop()  # pushes what it learned
    state = copy_hash(redis_url, predictor_key("default", prefix))
    _log(cfg, f"predictor taught on {len(records)} requests of other prompts ({len(state)} fields)")
    return state


def _one(cfg: CompareConfig, workload: Workload, catalog: PromptCatalog, mode: str, load: float, rate: float,
         rows: list[TraceRow] | None, direct: tuple[str, ...], redis_url: str, thresholds: tuple[int, int],
         logs: Path, trained: dict[bytes, bytes]) -> tuple[dict[str, Any], list[RequestRecord]]:
    child = None
    urls = direct
    if mode != "direct":
        prefix = f"cmp{uuid.uuid4().hex[:8]}"
        if trained:
            paste_hash(redis_url, predictor_key("default", prefix), trained)
        conf = mode_gateway_config(mode, redis_url, prefix, list(direct), cfg.sim.model, cfg.sim.max_num_seqs,
                                   free_port(), cfg.gateway_settings)
        child = gateway(conf, f"gateway-{mode}-{load}", logs)
        try:
            urls = (child.start("/ready"),)
        except StackError as exc:
            raise CompareError(str(exc)) from None
    sampler = LimitSampler(urls[0]) if child is not None else None
    try:
        lc = load_config(cfg, workload, urls, rate, rows, Part.MEASURE, uses_oracle(mode))
        with sampler or nullcontext():
            records = run_async(_run(lc, catalog, f"{mode} @ {load:.2f}", cfg.quiet))
        paused = pause_stats(urls[0]) if child is not None else None
    finally:
        if child is not None:
            child.stop()
    slos = {c.name: c.slo for c in workload.classes}
    summary = summarize(records, slos, lc.warmup, [c.name for c in workload.classes])
    row = run_row(mode, load, rate, workload.name, summary, records, lc.warmup, thresholds, slos)
    row["sent"] = len(records)
    if sampler is not None:
        row["limit_trajectory"] = sampler.samples
    if paused is not None:
        row["pauses"] = paused
    _log(cfg, f"load {load:.2f} {mode:>11}: {summary.overall.count} ok, {summary.overall.failed} failed, "
              f"{summary.overall.cancelled} cancelled, {summary.overall.output_tps:.0f} output tok/s")
    return row, records

