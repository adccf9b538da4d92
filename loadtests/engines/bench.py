"""``triage bench compare --engine vllm|llamacpp``: the honest comparison against a real engine.

The same workload, modes and run code as on the simulator (``loadtests/compare_runs.py``),
with the simulators replaced by one real engine — vLLM (CPU build) or llama.cpp's
``llama-server``, serving the tiny random-weight Llama — and a length sidecar
(``length_proxy``) in front of it that stops each reply at its true length. Every arm goes through the sidecar, ``direct`` included; the gateway never
sees a length (clients send no ``max_tokens``; the table lives in the sidecar only).

Run-to-run spread on a shared machine is large, so each mode runs ``--repeats`` times,
interleaved (repeat 1 runs every mode, then repeat 2, each repeat in a rotated order)
so drifting machine noise hits every arm alike; the report gives medians with ranges.
Every arm replays the same prompts, so an engine that caches prompts across requests is
reset before each arm where it can be (llama.cpp: a restart); the report says whether.

Before the runs it measures the engine's capacity three ways, closed-loop with every
batch slot busy: straight to the sidecar; the same with an idle gateway process
running beside it (the gateway shares the cores with the engine); and through that
gateway. The ratios say what the gateway costs the engine here.

The engine's speed is timed too (``speed.py``: the same fixed work straight to it) beside
the capacity and before and after every arm: the report's last row says how fast the
engine ran in each arm against the capacity's measurement (below 1: that arm ran at more
than its nominal load).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.server.embedded import EmbeddedRedis, free_port
from gateway.settings import Settings
from loadtests.compare_options import CompareConfig, CompareError, compare_config
from loadtests.compare_runs import (
    hidden_lengths_table,
    load_config,
    log,
    measure_capacity,
    run_arm,
    train_predictor,
)
from loadtests.datasets import PromptCatalog
from loadtests.engines import speed
from loadtests.engines.pairs import paired_ratios, value
from loadtests.engines.under_test import engine_accounting, keep_apart, start_engine
from loadtests.engines.vllm import MODEL_NAME
from loadtests.length_table import FILE_NAME, write_length_table
from loadtests.plan import LoadConfig
from loadtests.report import record_json, write_json, write_records
from loadtests.stack import Child, StackError, gateway, gateway_config
from loadtests.workload import load_workload

# (label, class or "overall", metric) of the table
METRICS = (
    ("short TTFT p50 (s)", "short", "ttft_p50_s"),
    ("short TTFT p99 (s)", "short", "ttft_p99_s"),
    ("short E2E mean (s)", "short", "e2e_mean_s"),
    ("medium E2E mean (s)", "medium", "e2e_mean_s"),
    ("long E2E p99 (s)", "long", "e2e_p99_s"),
    ("short queue wait p99 (ms)", "short", "queue_p99_ms"),
    ("long queue wait p99 (ms)", "long", "queue_p99_ms"),
    ("output tok/s", "overall", "output_tps"),
    ("requests ok", "overall", "count"),
    ("failed", "overall", "failed"),
    ("cancelled at drain end", "overall", "cancelled"),
    ("reported / true output tokens", "tokens", "reported_vs_planned"),
    ("concurrency limit, median", "limit", "limit"),
    ("pauses per request", "pauses", "pauses_per_request"),
    ("re-read prefill share", "pauses", "resume_prefill_share"),
    ("resumes from token ids", "pauses", "resumes_from_token_ids"),
    ("resumes from text", "pauses", "resumes_from_text"),
    ("engine: prompt tokens computed", "engine", "prompt_computed"),
    ("engine: prefix-cache hit share", "engine", "hit_share"),
    ("engine: generated / delivered tokens", "engine", "generated_vs_delivered"),
    ("engine speed, slower of before/after ÷ at capacity", "engine_speed", "vs_capacity"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags ``bench compare`` gains for a real engine."""
    p.add_argument("--engine", choices=("sim", "vllm", "llamacpp"), default="sim",
                   help="backends: simulators (default), or one real vLLM or llama.cpp behind a length sidecar")
    p.add_argument("--repeats", type=int, default=3, help="--engine vllm: runs per mode, interleaved (default 3)")
    p.add_argument("--engine-model-dir", default=None, help="--engine vllm: the tiny model's folder (default OUT/model)")
    p.add_argument("--cost-rounds", type=int, default=1,
                   help="--engine vllm: rounds of engine capacity alone / beside a gateway / through it")
    p.add_argument("--engine-cpus", type=lambda t: {int(x) for x in t.split(",") if x.strip()}, default=set(),
                   help="--engine vllm|llamacpp: the engine's compute on these CPUs (e.g. 0) and everything else "
                        "the run starts on the others, so that no gateway, sidecar or client stalls its "
                        "spinning threads (default: no pinning)")
    p.add_argument("--cost-only", action="store_true",
                   help="--engine vllm: measure only what the gateway costs the engine, then stop")


def aggregate(runs: list[dict[str, Any]], modes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """mode -> metric label -> {median, min, max, n} over the repeats."""
    out: dict[str, dict[str, Any]] = {}
    for mode in modes:
        rows = [r for r in runs if r["mode"] == mode]
        out[mode] = {}
        for label, cls, key in METRICS:
            values = [v for v in (value(r, cls, key) for r in rows) if v is not None]
            out[mode][label] = ({"median": statistics.median(values), "min": min(values), "max": max(values),
                                 "n": len(values)} if values else None)
    return out


def _sidecar(upstream: str, table: Path, logs: Path, tokenize: str = "vllm") -> Child:
    port = free_port()
    cmd = [sys.executable, "-m", "loadtests.engines.length_proxy", "--upstream", upstream, "--table", str(table),
           "--port", str(port), "--tokenize", tokenize]
    return Child("length sidecar", cmd, f"http://127.0.0.1:{port}", logs / "length-proxy.log")


def group_cpu_s(pgid: int, pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by every live process of a process group
    (or by the one process ``pid``)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat") if pid is None else [Path(f"/proc/{pid}/stat")]:
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if pid is not None or int(fields[2]) == pgid:  # after the name: state, ppid, pgrp, ..., utime, stime
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _gateway_costs(cfg: CompareConfig, base: LoadConfig, catalog: PromptCatalog, direct: tuple[str, ...],
                   redis_url: str, logs: Path, rounds: int, engine_pgid: int) -> dict[str, Any]:
    """Engine capacity (output tokens/s, closed loop) alone, beside an idle gateway process,
    through that gateway, and through a gateway whose streams may be paused but never are
    (``through_pausable_gateway``: preempt on, a pause budget of 0, the backends' resume
    set: every stream asks the engine for its running count and its token ids, and the
    gateway reads every chunk, as in a ``*_preempt`` arm); the four interleaved ``rounds``
    times, medians and ranges. Through each gateway, also the CPU the gateway process and
    the engine each used."""
    cfg = replace(cfg, capacity_rps=None)  # always measured here, even when --capacity is given
    conf = gateway_config(redis_url, f"cmpcost{uuid.uuid4().hex[:8]}", "fifo", list(direct), cfg.sim.model,
                          cfg.sim.max_num_seqs, free_port())
    pausable = gateway_config(redis_url, f"cmpcostp{uuid.uuid4().hex[:8]}", "fifo", list(direct), cfg.sim.model,
                              cfg.sim.max_num_seqs, free_port(), {"preempt": True, "pause_budget": 0.0})
    for b in pausable["backends"]:
        b["resume"] = cfg.resume
    tps: dict[str, list[float]] = {"alone": [], "beside_idle_gateway": [], "through_gateway": [],
                                   "through_pausable_gateway": []}
    cores: dict[str, list[float]] = {"gateway": [], "engine": [], "pausable_gateway": [], "engine_pausable": []}

    def through(child: Child, url: str, key: str, gateway_key: str, engine_key: str) -> None:
        via = replace(base, target=replace(base.target, urls=(url,)))
        pid = child._proc.pid if child._proc is not None else 0
        g0, e0, t0 = group_cpu_s(0, pid), group_cpu_s(engine_pgid), time.monotonic()
        tps[key].append(measure_capacity(cfg, via, catalog, (url,))["output_tps"])
        wall = time.monotonic() - t0
        cores[gateway_key].append(round((group_cpu_s(0, pid) - g0) / wall, 3))
        cores[engine_key].append(round((group_cpu_s(engine_pgid) - e0) / wall, 3))

    for _ in range(rounds):
        tps["alone"].append(measure_capacity(cfg, base, catalog, direct)["output_tps"])
        child = gateway(conf, "gateway-cost", logs)
        try:
            url = child.start("/ready")
            tps["beside_idle_gateway"].append(measure_capacity(cfg, base, catalog, direct)["output_tps"])
            through(child, url, "through_gateway", "gateway", "engine")
        except StackError as exc:
            raise CompareError(str(exc)) from None
        finally:
            child.stop()
        child = gateway(pausable, "gateway-cost-pausable", logs)
        try:
            through(child, child.start("/ready"), "through_pausable_gateway", "pausable_gateway", "engine_pausable")
        except StackError as exc:
            raise CompareError(str(exc)) from None
        finally:
            child.stop()
    out: dict[str, Any] = {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "values": v}
                           for k, v in tps.items()}
    alone = [max(x, 1e-9) for x in tps["alone"]]
    for key in ("beside_idle_gateway", "through_gateway", "through_pausable_gateway"):
        ratios = [round(x / a, 3) for x, a in zip(tps[key], alone, strict=True)]  # paired within a round
        out[f"{key}_ratio"] = {"median": statistics.median(ratios), "values": ratios}
    out["cores_used_through_gateway"] = cores  # CPU seconds per second of the run, per process (group)
    return out


def machine() -> dict[str, Any]:
    """What the numbers ran on: cores, CPU model, load average (others share this machine)."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown") if Path("/proc/cpuinfo").exists() else "unknown"
    return {"cores": os.cpu_count(), "cpu": model, "load_average": [round(x, 2) for x in os.getloadavg()]}


def run(args: argparse.Namespace) -> int:
    cfg = compare_config(args)
    at_start = machine()
    if args.repeats < 1:
        raise CompareError("--repeats must be at least 1")
    workload = load_workload(cfg.workload)
    catalog = PromptCatalog(cfg.data_dir)
    thresholds = (Settings.model_fields["short_max_tokens"].default,
                  Settings.model_fields["medium_max_tokens"].default)
    table = hidden_lengths_table(cfg, workload, catalog) or write_length_table((cfg.out / FILE_NAME).resolve(), {})
    logs = cfg.out / "logs"
    runs: list[dict[str, Any]] = []
    rest = keep_apart(args.engine_cpus)  # before anything is started: it all inherits the CPUs
    with ExitStack() as stack:
        redis = EmbeddedRedis()
        redis_url = redis.start()
        stack.callback(redis.stop)
        engine = start_engine(args.engine, cfg, args.engine_model_dir, logs, stack, args.engine_cpus)
        cfg = replace(cfg, sim=replace(cfg.sim, model=MODEL_NAME, profile=engine.label.replace(" ", "-")),
                      resume=engine.resume)
        started_s = engine.started_s
        log(cfg, f"{engine.label} up in {started_s:.0f} s at {engine.url}")
        sidecar = _sidecar(engine.url, table, logs, engine.tokenize)
        stack.callback(sidecar.stop)
        try:
            direct = (sidecar.start("/health"),)
        except StackError as exc:
            raise CompareError(str(exc)) from None
        base = load_config(cfg, workload, direct, 1.0, None)
        capacity = measure_capacity(cfg, base, catalog, direct)
        capacity["engine_speed_tps"] = speed.measure(engine.url, MODEL_NAME)  # the fixed work, beside it
        log(cfg, f"capacity: {capacity['rps']:.3f} req/s ({capacity.get('output_tps')} output tok/s); "
                 f"engine speed {capacity['engine_speed_tps']} tok/s")
        costs = _gateway_costs(cfg, base, catalog, direct, redis_url, logs, args.cost_rounds, engine.pid)
        log(cfg, f"gateway cost: {costs}")
        if args.cost_only:
            write_json(cfg.json_path, {"schema": "triage.compare-engine-cost/1", "engine": engine.label,
                                       "machine": {"at_start": at_start, "at_end": machine()},
                                       "capacity_s": cfg.capacity_s, "max_num_seqs": cfg.sim.max_num_seqs,
                                       "gateway_cost": costs})
            return 0
        trained = train_predictor(cfg, workload, catalog, direct, redis_url, capacity["rps"], logs)
        for rep in range(args.repeats):
            order = cfg.modes[rep % len(cfg.modes):] + cfg.modes[: rep % len(cfg.modes)]
            for load in cfg.loads:
                for mode in order:
                    if engine.reset is not None:
                        engine.reset()  # no arm finds the prompts of the arm before it cached
                    fast_before = speed.measure(engine.url, MODEL_NAME)
                    counters, load_before = engine.metrics(), os.getloadavg()
                    row, records = run_arm(cfg, workload, catalog, mode, load, load * capacity["rps"], None,
                                           direct, redis_url, thresholds, logs, trained)
                    row["repeat"] = rep
                    row["load_average"] = {"before": [round(x, 2) for x in load_before],
                                           "after": [round(x, 2) for x in os.getloadavg()]}
                    as_json = [record_json(r) for r in records]
                    row["tokens"] = token_accounting(as_json, cfg.warmup_s)
                    row["engine"] = engine_accounting(counters, engine.metrics(), as_json, engine.counters)
                    row["engine_speed"] = speed.beside(fast_before, speed.measure(engine.url, MODEL_NAME),
                                                       capacity["engine_speed_tps"])
                    runs.append(row)
                    write_records(cfg.out / "runs" / f"{mode}-{load}-r{rep}.jsonl", records)
    report = {
        "schema": "triage.compare-engine/1",
        "config": {"engine": engine.label, "model": engine.model,
                   "workload": workload.name, "lengths": workload.lengths.value, "loads": list(cfg.loads),
                   "modes": list(cfg.modes), "repeats": args.repeats, "max_num_seqs": cfg.sim.max_num_seqs,
                   "duration_s": cfg.duration_s, "warmup_s": cfg.warmup_s, "drain_s": cfg.drain_s,
                   "predictor_training_s": cfg.train_s, "seed": cfg.seed, "class_thresholds": list(thresholds),
                   "length_stop": "sidecar (loadtests/engines/length_proxy.py): max_tokens + ignore_eos",
                   "engine_reset_before_each_arm": engine.reset is not None},
        "machine": {"at_start": at_start, "at_end": machine(), "engine_start_s": round(started_s, 1),
                    "engine_cpus": sorted(args.engine_cpus), "other_cpus": sorted(rest)},
        "capacity": capacity,
        "gateway_cost": costs,
        "data_origin": catalog.origin,
        "by_load": by_load(runs, cfg.modes),
        "runs": runs,
    }
    write_json(cfg.json_path, report)
    (cfg.out / "compare.md").write_text(markdown(report), encoding="utf-8")
    if not cfg.quiet:
        print(markdown(report))
    return 0 if all(r["overall"]["count"] for r in runs) else 1


def _fmt(cell: dict[str, Any] | None, whole: bool = False) -> str:
    if cell is None:
        return "-"
    m, lo, hi = cell["median"], cell["min"], cell["max"]
    digits = 0 if whole or m >= 100 else 2
    return f"{m:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def by_load(runs: list[dict[str, Any]], modes: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per load: the summary over the repeats and the paired ratios (loads never mixed)."""
    loads = sorted({r["load"] for r in runs})
    return [{"load": load, "summary": aggregate([r for r in runs if r["load"] == load], modes),
             "paired_ratios": paired_ratios([r for r in runs if r["load"] == load])} for load in loads]


def markdown(report: dict[str, Any]) -> str:
    """The tables, one per load: per mode, median over the repeats (min–max, the worst
    repeat at one end); then the ratios paired within each repeat."""
    modes = report["config"]["modes"]
    lines: list[str] = []
    for part in report["by_load"]:
        lines += [f"### load {part['load']}", "", "| metric | " + " | ".join(modes) + " |",
                  "|---|" + "---:|" * len(modes)]
        for label, _, _ in METRICS:
            whole = label in ("requests ok", "failed", "cancelled at drain end")
            lines.append(f"| {label} | " + " | ".join(_fmt(part["summary"][m][label], whole) for m in modes) + " |")
        lines += ["", "| paired ratio (per repeat) | values | median |", "|---|---|---:|"]
        for r in part["paired_ratios"]:
            lines.append(f"| {r['ratio']} | {', '.join(f'{v:.2f}' for v in r['values'])} | {r['median']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def token_accounting(records: list[dict[str, Any]], warmup_s: float) -> dict[str, Any]:
    """Output tokens the client was told (usage) against the true lengths the sidecar made
    the engine generate, over the measured requests that completed."""
    ok = [r for r in records if r.get("ok") and r.get("start_s", 0.0) >= warmup_s]
    planned = sum(int(r["planned_tokens"]) for r in ok)
    reported = sum(int(r["output_tokens"] or 0) for r in ok)
    short = sum(1 for r in ok if (r["output_tokens"] or 0) < r["planned_tokens"])
    return {"planned": planned, "reported": reported, "requests_reported_short": short,
            "reported_vs_planned": round(reported / planned, 4) if planned else None}


def rebuild(path: Path, runs_dir: Path | None = None) -> str:
    """Recompute a saved report's summary and table from its runs (``python -m
    loadtests.engines.bench FILE [RUNS_DIR]``): the figures come from the rows, never from
    the table; with the run records (``OUT/runs``), also each row's token accounting."""
    import orjson

    report = orjson.loads(path.read_bytes())
    if runs_dir is not None:
        for row in report["runs"]:
            records_path = runs_dir / f"{row['mode']}-{row['load']}-r{row['repeat']}.jsonl"
            records = [orjson.loads(line) for line in records_path.read_bytes().splitlines() if line.strip()]
            row["tokens"] = token_accounting(records, report["config"]["warmup_s"])
    modes = tuple(report["config"]["modes"])
    report.pop("summary", None)
    report.pop("paired_ratios", None)
    report["by_load"] = by_load(report["runs"], modes)
    write_json(path, report)
    return markdown(report)


if __name__ == "__main__":
    print(rebuild(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None))
