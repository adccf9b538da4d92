"""Command line of the load tools: ``loadtest`` (one run against any URL), ``compare``, ``length-table``.

``add_*_arguments(parser)`` / ``run_*(args) -> int`` pairs, so ``triage`` and
``python -m loadtests`` share them. Flags are parsed here, once, into typed settings;
``TRIAGE_DATA_DIR`` is read here and nowhere else. Exit status: 0 done, 1 no request
succeeded, 2 a configuration problem (one line on stderr).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from loadtests.arrivals import ArrivalSpec, Process
from loadtests.client import Target
from loadtests.datasets import PromptCatalog
from loadtests.length_table import write_length_table
from loadtests.metrics import Warmup, summarize
from loadtests.options import UsageError, resolve_data_dir
from loadtests.plan import LoadConfig, TraceReplay, execute
from loadtests.progress import Progress
from loadtests.report import markdown, report_json, write_json, write_records
from loadtests.requests import RequestFactory
from loadtests.runner import Limits, run_async
from loadtests.timeseries import timeseries
from loadtests.traces import TraceError
from loadtests.workload import Api, Lengths, WorkloadError, builtin_workloads, load_workload


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", default="mixed",
                   help=f"built-in workload name ({', '.join(builtin_workloads())}) or a YAML path")
    p.add_argument("--data-dir", default=None,
                   help="folder of prompt and trace files (default $TRIAGE_DATA_DIR, else ../shared/data)")
    p.add_argument("--seed", type=int, default=0, help="seed of requests and arrivals (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress display")


def add_loadtest_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``triage loadtest``."""
    add_common_arguments(p)
    p.add_argument("--url", action="append", required=True,
                   help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000 (repeat: round-robin)")
    p.add_argument("--model", default="sim-model", help="model name sent (default sim-model)")
    p.add_argument("--api", choices=[a.value for a in Api], default=None, help="default: the workload's")
    p.add_argument("--no-stream", action="store_true", help="non-streaming requests (TTFT = E2E)")
    p.add_argument("--api-timeout", type=float, default=600.0, help="per-request timeout, seconds")
    a = p.add_argument_group("arrivals")
    a.add_argument("--arrival", choices=[x.value for x in Process], default=None,
                   help="default: trace for trace workloads, else poisson")
    a.add_argument("--rate", type=float, default=None, help="requests/s (poisson, gamma; ramp's end rate)")
    a.add_argument("--cv", type=float, default=2.0, help="gamma: burstiness, CV of the gaps (default 2)")
    a.add_argument("--ramp-from", type=float, default=0.1, help="ramp: start rate (default 0.1)")
    a.add_argument("--ramp-s", type=float, default=None, help="ramp: seconds to reach --rate (default --duration)")
    a.add_argument("--concurrency", type=int, default=8, help="closed loop: clients (default 8)")
    a.add_argument("--trace", default=None, help="trace file to replay (default: the workload's)")
    a.add_argument("--trace-format", choices=["azure", "mooncake"], default="azure")
    a.add_argument("--trace-offset", type=float, default=0.0, help="start this many trace seconds in")
    a.add_argument("--time-scale", type=float, default=1.0, help="multiply trace time (0.5: twice as fast)")
    b = p.add_argument_group("bounds and measurement")
    b.add_argument("--duration", type=float, default=60.0, help="sending window, seconds (default 60)")
    b.add_argument("--max-requests", type=int, default=None, help="stop sending after this many")
    b.add_argument("--drain", type=float, default=60.0,
                   help="then wait this long for requests in flight before cancelling them (default 60)")
    b.add_argument("--warmup-requests", type=int, default=0, help="exclude the first N requests")
    b.add_argument("--warmup-s", type=float, default=0.0, help="exclude requests sent in the first T seconds")
    o = p.add_argument_group("output")
    o.add_argument("--out", default="loadtest-out", help="folder for report.json, summary.md, plots")
    o.add_argument("--no-plots", action="store_true")


def load_config(args: argparse.Namespace) -> LoadConfig:
    """The typed configuration of one run, from ``add_loadtest_arguments`` flags."""
    workload = load_workload(args.workload)
    process = Process(args.arrival) if args.arrival else (Process.TRACE if workload.trace else Process.POISSON)
    rate = args.rate if args.rate is not None else (workload.rate or 1.0)
    try:
        arrivals = ArrivalSpec(process=process, rate=rate, cv=args.cv, ramp_from=args.ramp_from,
                               ramp_s=args.ramp_s or args.duration, concurrency=args.concurrency)
        limits = Limits(args.duration, args.max_requests, args.drain)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.time_scale <= 0:
        raise UsageError("--time-scale must be > 0")
    target = Target(tuple(u.rstrip("/").removesuffix("/v1") for u in args.url), args.model,
                    Api(args.api) if args.api else workload.api, not args.no_stream, args.api_timeout)
    replay = TraceReplay(Path(args.trace) if args.trace else None, args.trace_format, args.trace_offset,
                         args.time_scale)
    return LoadConfig(target, workload, arrivals, limits, Warmup(args.warmup_requests, args.warmup_s),
                      args.seed, resolve_data_dir(args.data_dir), replay)


def quiet_http_logs() -> None:
    # httpx logs every request at INFO; a load test sends thousands
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run_loadtest(args: argparse.Namespace) -> int:
    """``triage loadtest``: one run, then report.json, requests.jsonl, summary.md and plots in --out."""
    quiet_http_logs()
    try:
        cfg = load_config(args)
    except (WorkloadError, UsageError) as exc:
        print(f"loadtest: {exc}", file=sys.stderr)
        return 2
    catalog = PromptCatalog(cfg.data_dir)
    if cfg.workload.lengths is Lengths.HIDDEN and not args.quiet:
        print(f"loadtest: {cfg.workload.name} hides lengths (no max_tokens): the target must stop each reply "
              "itself; a simulator does so with --length-table FILE from `python -m loadtests length-table`",
              file=sys.stderr)
    progress = Progress(cfg.workload.name, cfg.limits.max_requests, cfg.limits.duration_s,
                        enabled=not args.quiet and sys.stderr.isatty())
    try:
        with progress:
            result = run_async(execute(cfg, progress.record, catalog))
    except TraceError as exc:
        print(f"loadtest: {exc}", file=sys.stderr)
        return 2
    slos = {c.name: c.slo for c in cfg.workload.classes}
    summary = summarize(result.records, slos, cfg.warmup, [c.name for c in cfg.workload.classes])
    series = timeseries(result.records)
    out = Path(args.out)
    write_json(out / "report.json", report_json(cfg, summary, series, result.wall_s, catalog.origin))
    write_records(out / "requests.jsonl", result.records)
    text = markdown(cfg, summary)
    (out / "summary.md").write_text(text, encoding="utf-8")
    if not args.no_plots:
        from loadtests.plots import latency_cdf, timeline

        latency_cdf(result.records, out / "latency_cdf.png", f"{cfg.workload.name}: latency CDF per class")
        timeline(series, out / "timeline.png", f"{cfg.workload.name}: throughput and in-flight")
    print(text)
    print(f"wrote {out}/report.json, summary.md, requests.jsonl" + ("" if args.no_plots else ", plots"))
    return 0 if summary.overall.count else 1


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``triage bench compare``."""
    from loadtests.compare import add_arguments

    add_common_arguments(p)
    add_arguments(p)


def run_compare(args: argparse.Namespace) -> int:
    """``triage bench compare``: the same seeded load through direct, FIFO, short-first and oracle."""
    from loadtests.compare import run
    from loadtests.compare_options import CompareError

    quiet_http_logs()
    started = time.perf_counter()
    try:
        code = run(args)
    except (WorkloadError, UsageError, CompareError, TraceError) as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"compare: done in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return code


def add_length_table_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``length-table``."""
    p.add_argument("--workload", default="sharegpt-chat", help="a workload with lengths: hidden")
    p.add_argument("--data-dir", default=None, help="folder of prompt files (as for loadtest)")
    p.add_argument("--out", default="length_table.jsonl", help="the JSONL file to write")


def run_length_table(args: argparse.Namespace) -> int:
    """``length-table``: every prompt of a hidden-length workload with its true length, for
    ``python -m simulator --length-table FILE`` before a ``loadtest`` against it."""
    try:
        workload = load_workload(args.workload)
        if workload.lengths is not Lengths.HIDDEN:
            raise UsageError(f"workload {workload.name} sends its lengths (lengths: max_tokens); no table needed")
        factory = RequestFactory(workload, PromptCatalog(resolve_data_dir(args.data_dir)), 0)
    except (WorkloadError, UsageError) as exc:
        print(f"length-table: {exc}", file=sys.stderr)
        return 2
    lengths = factory.true_lengths()
    path = write_length_table(Path(args.out), lengths)
    print(f"wrote {len(lengths)} prompts to {path}")
    return 0
