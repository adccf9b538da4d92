"""One load test, fully described: target, workload, arrivals, bounds; and the request stream it sends.

``LoadConfig`` is built once at the edge (the command line, or ``compare``) and is all
that ``execute`` needs. Requests and arrival times come from two independent seeded
streams, so the same seed sends the same requests whatever the rate.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.arrivals import ArrivalSpec, Process, open_loop_times
from loadtests.client import RequestRecord, Target
from loadtests.datasets import PromptCatalog
from loadtests.metrics import Warmup
from loadtests.requests import Part, PlannedRequest, RequestFactory
from loadtests.runner import Limits, RunResult, run_closed_loop, run_open_loop
from loadtests.traces import TraceError, TraceRow, load_trace, window
from loadtests.workload import Workload


@dataclass(frozen=True, slots=True)
class TraceReplay:
    path: Path | None = None  # None: the workload's own trace file
    format: str = "azure"
    offset_s: float = 0.0  # start this far into the trace
    time_scale: float = 1.0  # multiplies trace time: 0.5 replays twice as fast


@dataclass(frozen=True, slots=True)
class LoadConfig:
    target: Target
    workload: Workload
    arrivals: ArrivalSpec = ArrivalSpec()
    limits: Limits = Limits()
    warmup: Warmup = Warmup()
    seed: int = 0
    data_dir: Path | None = None
    replay: TraceReplay = field(default_factory=TraceReplay)
    part: Part = Part.ALL  # which prompts: a comparison teaches on one part and measures on the other


def trace_rows(cfg: LoadConfig) -> list[TraceRow] | None:
    """The trace this run reads (times, or lengths, or both), windowed and scaled; None if none."""
    w = cfg.workload
    if cfg.arrivals.process is not Process.TRACE and w.trace is None:
        return None
    if cfg.replay.path is not None:
        path, fmt = cfg.replay.path, cfg.replay.format
    elif w.trace is not None:
        path = Path(w.trace.file)
        if not path.is_absolute():
            if cfg.data_dir is None:
                raise TraceError(f"trace {w.trace.file}: no data folder (give --data-dir)")
            path = cfg.data_dir / path
        fmt = w.trace.format
    else:
        raise TraceError("trace arrivals need a trace file (--trace) or a workload with a trace")
    return window(load_trace(path, fmt, cfg.seed), cfg.replay.offset_s, cfg.replay.time_scale)


def request_stream(cfg: LoadConfig, catalog: PromptCatalog, rows: list[TraceRow] | None
                   ) -> Iterator[PlannedRequest]:
    """Every request of the run, in send order (unbounded unless a trace ends it)."""
    factory = RequestFactory(cfg.workload, catalog, cfg.seed, cfg.part)
    proc = cfg.arrivals.process
    if proc is Process.TRACE:
        assert rows is not None
        for i, row in enumerate(rows):
            yield (factory.from_trace(i, row, row.t_s) if cfg.workload.trace else factory.next(i, row.t_s))
        return
    times = None if proc is Process.CONCURRENCY else open_loop_times(cfg.arrivals, random.Random(cfg.seed + 1))
    i = 0
    while True:
        at = next(times) if times is not None else None
        if cfg.workload.trace is not None:
            assert rows is not None
            if i >= len(rows):
                return
            yield factory.from_trace(i, rows[i], at)
        else:
            yield factory.next(i, at)
        i += 1


async def execute(cfg: LoadConfig, on_record: Callable[[RequestRecord], None] | None = None,
                  catalog: PromptCatalog | None = None) -> RunResult:
    catalog = catalog or PromptCatalog(cfg.data_dir)
    stream = request_stream(cfg, catalog, trace_rows(cfg))
    if cfg.arrivals.closed_loop:
        return await run_closed_loop(cfg.target, stream, cfg.arrivals.concurrency, cfg.limits, on_record)
    return await run_open_loop(cfg.target, stream, cfg.limits, on_record)
