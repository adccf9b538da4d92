"""A load test's outputs: the JSON report (schema in ``docs/loadtests.md``), per-request JSONL, Markdown.

Seconds everywhere; ``null`` where a number is undefined (no successful request, no SLO).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from loadtests.client import RequestRecord
from loadtests.metrics import Dist, GroupSummary, Summary
from loadtests.plan import LoadConfig
from loadtests.timeseries import TimeSeries

SCHEMA = "triage.loadtest/1"


def config_json(cfg: LoadConfig) -> dict[str, Any]:
    w = cfg.workload
    return {
        "workload": {
            "name": w.name,
            "api": w.api.value,
            "trace": dataclasses.asdict(w.trace) if w.trace else None,
            "classes": [{"name": c.name, "share": c.share, "tier": c.tier, "slo": dataclasses.asdict(c.slo)}
                        for c in w.classes],
        },
        "target": {"urls": list(cfg.target.urls), "model": cfg.target.model, "stream": cfg.target.stream,
                   "api": cfg.target.api.value},
        "arrivals": {**dataclasses.asdict(cfg.arrivals), "process": cfg.arrivals.process.value},
        "replay": {**dataclasses.asdict(cfg.replay),
                   "path": str(cfg.replay.path) if cfg.replay.path else None},
        "limits": dataclasses.asdict(cfg.limits),
        "warmup": dataclasses.asdict(cfg.warmup),
        "seed": cfg.seed,
    }


def summary_json(summary: Summary) -> dict[str, Any]:
    return dataclasses.asdict(summary)


def report_json(cfg: LoadConfig, summary: Summary, series: TimeSeries, wall_s: float,
                data_origin: dict[str, str]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "config": config_json(cfg),
        "data_origin": data_origin,
        "wall_s": round(wall_s, 3),
        "summary": summary_json(summary),
        "timeseries": dataclasses.asdict(series),
    }


def record_json(r: RequestRecord) -> dict[str, Any]:
    d = dataclasses.asdict(r)
    d.pop("itl_s")
    d["tpot_s"] = r.tpot_s
    return d


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def write_records(path: Path, records: Sequence[RequestRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for r in sorted(records, key=lambda r: r.index):
            fh.write(orjson.dumps(record_json(r)) + b"\n")


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def _dist_cells(d: Dist) -> list[str]:
    return [ms(d.mean), ms(d.p50), ms(d.p90), ms(d.p99)]


def markdown(cfg: LoadConfig, summary: Summary) -> str:
    groups: list[tuple[str, GroupSummary]] = [*summary.classes.items(), ("overall", summary.overall)]
    lines = [
        f"# Load test: {cfg.workload.name}",
        "",
        f"Target {', '.join(cfg.target.urls)} ({cfg.target.api.value}, "
        f"{'streaming' if cfg.target.stream else 'not streaming'}); arrivals {cfg.arrivals.process.value}; "
        f"seed {cfg.seed}. Measured {summary.duration_s:.1f} s; {summary.sent} requests sent, "
        f"{summary.warmup_excluded} warm-up requests excluded.",
        "",
        "| class | ok | failed | cancelled | RPS | output TPS | total TPS | goodput RPS | SLO met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, g in groups:
        attained = "-" if g.slo_attainment is None else f"{g.slo_attainment:.0%}"
        lines.append(f"| {name} | {g.count} | {g.failed} | {g.cancelled} | {g.rps:.2f} | {g.output_tps:.0f} | "
                     f"{g.total_tps:.0f} | {_num(g.goodput_rps)} | {attained} |")
    for metric in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        label = metric.removesuffix("_s").upper()
        lines += ["", f"**{label}** (ms)", "", "| class | mean | p50 | p90 | p99 |", "|---|---:|---:|---:|---:|"]
        for name, g in groups:
            lines.append(f"| {name} | " + " | ".join(_dist_cells(getattr(g, metric))) + " |")
    errors = summary.overall.errors
    if errors:
        lines += ["", "Failures: " + ", ".join(f"{k} {v}" for k, v in errors.items())]
    return "\n".join(lines) + "\n"
