"""The steps of a ``bench compare``, whatever serves the requests: measure capacity, teach
a predictor, run one arm (one mode at one load).

The simulator comparison (``loadtests/compare.py``) and the vLLM one
(``loadtests/engines/bench.py``) each start their own backends, then call these with the
backends' URLs, so both measure with the same code.
"""

from __future__ import annotations

import sys
import uuid
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.server import redis_client
from gateway.server.embedded import free_port
from loadtests.arrivals import ArrivalSpec, Process
from loadtests.client import RequestRecord, Target
from loadtests.compare_options import CompareConfig, CompareError
from loadtests.compare_report import run_row
from loadtests.datasets import PromptCatalog
from loadtests.length_table import FILE_NAME, write_length_table
from loadtests.limit_trace import LimitSampler
from loadtests.metrics import Warmup, summarize
from loadtests.modes import mode_gateway_config, uses_oracle
from loadtests.pause_stats import pause_stats
from loadtests.plan import LoadConfig, TraceReplay, execute, trace_rows
from loadtests.progress import Progress
from loadtests.requests import Part, RequestFactory
from loadtests.runner import Limits, run_async
from loadtests.stack import StackError, gateway, gateway_config
from loadtests.timeseries import timeseries
from loadtests.traces import TraceRow
from loadtests.workload import Lengths, Workload
from scheduler.queue.keys import predictor_key

__all__ = ["copy_hash", "hidden_lengths_table", "load_config", "log", "mean_output_tokens", "measure_capacity",
           "paste_hash", "run_arm", "trace_scale", "train_predictor"]


def log(cfg: CompareConfig, text: str) -> None:
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


def hidden_lengths_table(cfg: CompareConfig, workload: Workload, catalog: PromptCatalog) -> Path | None:
    """For a workload that hides lengths: write every prompt's true length where the
    simulators will read it (``OUT/length_table.jsonl``); None for one that sends them."""
    if workload.lengths is not Lengths.HIDDEN:
        return None
    lengths = RequestFactory(workload, catalog, cfg.seed).true_lengths()
    return write_length_table((cfg.out / FILE_NAME).resolve(), lengths)


def train_predictor(cfg: CompareConfig, workload: Workload, catalog: PromptCatalog, direct: tuple[str, ...],
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
    log(cfg, f"predictor taught on {len(records)} requests of other prompts ({len(state)} fields)")
    return state


def run_arm(cfg: CompareConfig, workload: Workload, catalog: PromptCatalog, mode: str, load: float, rate: float,
            rows: list[TraceRow] | None, direct: tuple[str, ...], redis_url: str, thresholds: tuple[int, int],
            logs: Path, trained: dict[bytes, bytes]) -> tuple[dict[str, Any], list[RequestRecord]]:
    """One mode at one load: its gateway started (none for ``direct``) from a copy of the
    ``trained`` predictor, the load sent, the gateway stopped; the report's row and every record."""
    child = None
    urls = direct
    if mode != "direct":
        prefix = f"cmp{uuid.uuid4().hex[:8]}"
        if trained:
            paste_hash(redis_url, predictor_key("default", prefix), trained)
        conf = mode_gateway_config(mode, redis_url, prefix, list(direct), cfg.sim.model, cfg.sim.max_num_seqs,
                                   free_port(), cfg.gateway_settings, cfg.resume)
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
    log(cfg, f"load {load:.2f} {mode:>11}: {summary.overall.count} ok, {summary.overall.failed} failed, "
             f"{summary.overall.cancelled} cancelled, {summary.overall.output_tps:.0f} output tok/s")
    return row, records
