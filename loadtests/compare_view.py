"""Showing a comparison: side-by-side tables (rich, Markdown) and one PNG of the key figures.

Classes are by true output length (``short``, ``medium``, ``long``; see
``compare_report``), with each class's request count, so an empty class shows as 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from loadtests.plots import save_figure  # noqa: E402

COLUMNS = (
    # header, class ("overall" for the whole run), key, scale, format
    ("short n", "short", "_n", 1, "{:.0f}"),
    ("short TTFT p50 ms", "short", "ttft_p50_s", 1000, "{:.0f}"),
    ("short TTFT p99 ms", "short", "ttft_p99_s", 1000, "{:.0f}"),
    ("short E2E mean s", "short", "e2e_mean_s", 1, "{:.2f}"),
    ("short E2E p99 s", "short", "e2e_p99_s", 1, "{:.2f}"),
    ("short goodput rps", "short", "goodput_rps", 1, "{:.2f}"),
    ("medium n", "medium", "_n", 1, "{:.0f}"),
    ("medium TTFT p99 s", "medium", "ttft_p99_s", 1, "{:.2f}"),
    ("medium E2E mean s", "medium", "e2e_mean_s", 1, "{:.1f}"),
    ("medium E2E p99 s", "medium", "e2e_p99_s", 1, "{:.1f}"),
    ("long n", "long", "_n", 1, "{:.0f}"),
    ("long TTFT p99 s", "long", "ttft_p99_s", 1, "{:.2f}"),
    ("long E2E mean s", "long", "e2e_mean_s", 1, "{:.1f}"),
    ("long E2E p99 s", "long", "e2e_p99_s", 1, "{:.1f}"),
    ("long goodput rps", "long", "goodput_rps", 1, "{:.2f}"),
    ("RPS", "overall", "rps", 1, "{:.2f}"),
    ("output TPS", "overall", "output_tps", 1, "{:.0f}"),
    ("ok", "overall", "count", 1, "{:.0f}"),
    ("failed+cancelled", "overall", "_lost", 1, "{:.0f}"),
)


def _cell(row: dict[str, Any], cls: str, key: str, scale: float, fmt: str) -> str:
    if key == "_lost":
        return fmt.format(row["overall"]["failed"] + row["overall"]["cancelled"])
    src = row["overall"] if cls == "overall" else row["classes"].get(cls) or {}
    if key == "_n":  # every request of the class: completed, failed or cancelled
        return fmt.format(sum(src.get(k) or 0 for k in ("count", "failed", "cancelled")))
    value = src.get(key)
    return "-" if value is None else fmt.format(value * scale)


def _acc(row: dict[str, Any]) -> str:
    return "-" if row.get("class_accuracy") is None else f"{row['class_accuracy']:.0%}"


def _tau(row: dict[str, Any]) -> str:
    return "-" if row.get("kendall_tau") is None else f"{row['kendall_tau']:.2f}"


def _basis(report: dict[str, Any]) -> str:
    """One line: what the classes are, and whether the client told the lengths."""
    c = report["config"]
    short, medium = c["class_thresholds"]
    told = ("lengths hidden: prompts only, the simulators stop at the true length"
            if c.get("lengths") == "hidden" else "the client tells the length (max_tokens, ignore_eos)")
    return f"Classes by true output length: short <= {short}, medium <= {medium}, long > {medium} tokens; {told}."


def _loads(report: dict[str, Any]) -> list[float]:
    return sorted({r["load"] for r in report["runs"]})


def print_tables(report: dict[str, Any]) -> None:
    console = Console()
    for load in _loads(report):
        rows = [r for r in report["runs"] if r["load"] == load]
        table = Table(title=f"load {load:.2f} x capacity ({rows[0]['rate_rps']:.2f} req/s)")
        table.add_column("metric")
        for r in rows:
            table.add_column(r["mode"], justify="right")
        for header, cls, key, scale, fmt in COLUMNS:
            table.add_row(header, *[_cell(r, cls, key, scale, fmt) for r in rows])
        table.add_row("class accuracy", *[_acc(r) for r in rows])
        table.add_row("kendall tau", *[_tau(r) for r in rows])
        console.print(table)
    console.print(_basis(report))
    ratios = Table(title="ratios (targets from the design)")
    for h in ("load", "ratio", "value", "target", "met"):
        ratios.add_column(h)
    for x in report["ratios"]:
        if x["value"] is None:
            continue  # a ratio between modes this run did not include
        ratios.add_row(f"{x['load']:.2f}", x["ratio"], f"{x['value']:.2f}",
                       x["target"] or "", {True: "yes", False: "NO", None: ""}[x["met"]])
    console.print(ratios)


def markdown(report: dict[str, Any]) -> str:
    cap = report["capacity"]
    c = report["config"]
    lines = [
        f"Workload `{c['workload']}`; {c['backends']} x simulator `{c['profile']}` with max_num_seqs "
        f"{c['max_num_seqs']} (time scale {c['sim_time_scale']}); {c['duration_s']:.0f} s per run, "
        f"first {c['warmup_s']:.0f} s excluded; seed {c['seed']}. Capacity {cap['rps']:.3f} req/s "
        f"({'measured' if cap['measured'] else 'given'}; {cap['mean_output_tokens']} output tokens per request).",
        "",
        _basis(report),
        "",
    ]
    for load in _loads(report):
        rows = [r for r in report["runs"] if r["load"] == load]
        lines += [f"**Load {load:.2f}** ({rows[0]['rate_rps']:.2f} req/s)", "",
                  "| metric | " + " | ".join(r["mode"] for r in rows) + " |",
                  "|---|" + "---:|" * len(rows)]
        for header, cls, key, scale, fmt in COLUMNS:
            lines.append(f"| {header} | " + " | ".join(_cell(r, cls, key, scale, fmt) for r in rows) + " |")
        lines += ["| class accuracy | " + " | ".join(_acc(r) for r in rows) + " |",
                  "| kendall tau | " + " | ".join(_tau(r) for r in rows) + " |", ""]
    lines += ["| load | ratio | value | target | met |", "|---:|---|---:|---|---|"]
    for x in report["ratios"]:
        if x["value"] is None:
            continue
        lines.append(f"| {x['load']:.2f} | {x['ratio']} | {x['value']:.2f} | {x['target'] or ''} | "
                     f"{ {True: 'yes', False: '**no**', None: ''}[x['met']] } |")
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(report), encoding="utf-8")


PANELS = (
    ("short TTFT p99 (s)", "short", "ttft_p99_s", True),
    ("short E2E mean (s)", "short", "e2e_mean_s", True),
    ("long E2E p99 (s)", "long", "e2e_p99_s", False),
    ("output tokens / s", "overall", "output_tps", False),
)


def write_plot(path: Path, report: dict[str, Any]) -> None:
    """Short TTFT p99, short E2E mean, long E2E p99 (true-length classes) and output TPS."""
    loads = _loads(report)
    modes = list(dict.fromkeys(r["mode"] for r in report["runs"]))
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), dpi=80)
    width = 0.8 / max(1, len(modes))
    for ax, (title, name, key, log) in zip(axes.flat, PANELS, strict=True):
        for m, mode in enumerate(modes):
            values = []
            for load in loads:
                row = next((r for r in report["runs"] if r["mode"] == mode and r["load"] == load), None)
                src = (row or {}).get("overall" if name == "overall" else "classes", {})
                src = src if name == "overall" else src.get(name, {})
                values.append(src.get(key) or 0.0)
            ax.bar([i + m * width for i in range(len(loads))], values, width, label=mode)
        ax.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(loads))],
                      [f"load {x:.2f}" for x in loads])
        ax.set_title(title)
        if log:
            ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    save_figure(fig, path, f"{report['config']['workload']}: direct vs gateway policies, same seeded load")


def write_cdf_plot(path: Path, records: dict[tuple[str, float], list[Any]], label: str) -> None:
    """TTFT and E2E CDFs of the requests given (one class, ``label``), a line per mode, a column per load."""
    loads = sorted({load for _, load in records})
    modes = list(dict.fromkeys(mode for mode, _ in records))
    fig, axes = plt.subplots(2, len(loads), figsize=(4.2 * len(loads), 6.5), dpi=80, squeeze=False)
    for col, load in enumerate(loads):
        for row, (metric, name) in enumerate((("ttft_s", "TTFT"), ("e2e_s", "E2E"))):
            ax = axes[row][col]
            for mode in modes:
                values = sorted(getattr(r, metric) for r in records.get((mode, load), [])
                                if r.ok and getattr(r, metric) is not None)
                if values:
                    ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=mode)
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel(f"{label} {name} (s, log scale)")
            ax.set_title(f"load {load:.2f}")
            ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("fraction of requests")
    axes[1][0].set_ylabel("fraction of requests")
    axes[0][0].legend(fontsize=8)
    save_figure(fig, path, f"{label} requests: latency CDF per mode")
