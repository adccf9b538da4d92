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

This module is the command and its simulators. The flags and their settings are in
``compare_options``, the measuring steps in ``compare_runs``: the vLLM comparison
(``engines/bench.py``) uses both, and this module hands ``--engine vllm`` to it, so the
imports run one way only.
"""

from __future__ import annotations

import argparse
import signal
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from gateway.server.embedded import EmbeddedRedis
from gateway.settings import Settings
from loadtests import compare_options
from loadtests.client import RequestRecord
from loadtests.compare_options import CompareError, compare_config
from loadtests.compare_report import ratios, true_class
from loadtests.compare_runs import (
    hidden_lengths_table,
    load_config,
    log,
    measure_capacity,
    run_arm,
    train_predictor,
)
from loadtests.compare_view import print_tables, write_cdf_plot, write_markdown, write_plot
from loadtests.datasets import PromptCatalog
from loadtests.engines import bench
from loadtests.limit_trace import write_limit_plot
from loadtests.metrics import Warmup
from loadtests.plan import trace_rows
from loadtests.report import write_json, write_records
from loadtests.stack import Child, StackError, simulator
from loadtests.workload import load_workload

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every comparison's flags, then those a real engine adds (``--engine vllm``)."""
    compare_options.add_arguments(p)
    bench.add_arguments(p)


def _stop_on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds the ExitStack: every child is stopped


def run(args: argparse.Namespace) -> int:
    # Ctrl-C and SIGTERM stop the children too, even when started where SIGINT is ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _stop_on_term)
    if getattr(args, "engine", "sim") != "sim":
        return bench.run(args)
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
        trained = train_predictor(cfg, workload, catalog, direct, redis_url, capacity["rps"], logs)
        log(cfg, f"capacity: {capacity['rps']:.3f} req/s "
                  f"({capacity.get('output_tps', '-')} output tokens/s, {capacity['mean_output_tokens']} per request)")
        for load in cfg.loads:
            rate = load * capacity["rps"]
            for mode in cfg.modes:
                row, records = run_arm(cfg, workload, catalog, mode, load, rate, rows, direct, redis_url,
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
    log(cfg, f"wrote {cfg.json_path}; compare.md, compare.png, compare_cdf.png, runs/*.jsonl in {cfg.out}")
    return 0 if all(r["overall"]["count"] for r in runs) else 1
