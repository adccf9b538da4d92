"""PNG plots of a load test (matplotlib, Agg backend: no display needed).

- ``latency_cdf.png``: TTFT and E2E CDFs, one line per class.
- ``timeline.png``: output TPS, completions per second and requests in flight over time.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from loadtests.client import RequestRecord  # noqa: E402
from loadtests.timeseries import TimeSeries  # noqa: E402


def save_figure(fig: Any, path: Path, title: str, dpi: float | None = None) -> Path:
    """Title the figure, lay it out, write it (making its folder) and free it."""
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _cdf(ax: plt.Axes, values: list[float], label: str) -> None:
    v = sorted(values)
    if v:
        ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], label=f"{label} (n={len(v)})")


def latency_cdf(records: Sequence[RequestRecord], path: Path, title: str = "") -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=90)
    classes = sorted({r.cls for r in records})
    for cls in classes:
        ok = [r for r in records if r.ok and r.cls == cls]
        _cdf(axes[0], [r.ttft_s for r in ok if r.ttft_s is not None], cls)
        _cdf(axes[1], [r.e2e_s for r in ok if r.e2e_s is not None], cls)
    for ax, name in zip(axes, ("TTFT", "E2E"), strict=True):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels of a log axis overlap
        ax.set_xlabel(f"{name} (s, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, path, title or "latency CDF per class")


def timeline(series: TimeSeries, path: Path, title: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(10, 4), dpi=90)
    ax.plot(series.t_s, series.output_tps, label="output TPS", color="tab:blue")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("output tokens / s")
    right = ax.twinx()
    right.plot(series.t_s, series.in_flight, label="in flight", color="tab:orange")
    right.plot(series.t_s, series.rps, label="completions / s", color="tab:green", alpha=0.7)
    right.set_ylabel("requests in flight, completions / s")
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(handles, [str(h.get_label()) for h in handles], fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    return save_figure(fig, path, title or "throughput and in-flight requests over time")
