"""The concurrency limit over a run: sampled from a gateway's ``/admin/backends``.

A background thread asks every ``interval_s`` for each backend's limit, requests in
flight and the engine's own queue, so an adaptive limit's trajectory can be plotted
beside the load that moved it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx


class LimitSampler:
    def __init__(self, base_url: str, interval_s: float = 0.5) -> None:
        self._url = f"{base_url}/admin/backends"
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="limit-sampler", daemon=True)
        # {"t", "backend", "limit", "in_flight", "reason" (why the limit last changed), "state"
        # (health), "running" and "waiting" (the engine's own), "long_cap", "borrowed", "resume_cost"}
        self.samples: list[dict[str, Any]] = []

    def __enter__(self) -> LimitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        start = time.monotonic()
        with httpx.Client(timeout=2.0, trust_env=False) as http:
            while not self._stop.wait(self._interval):
                try:
                    backends = http.get(self._url).json()
                except (httpx.HTTPError, ValueError):
                    continue
                t = round(time.monotonic() - start, 2)
                for b in backends if isinstance(backends, list) else backends.get("backends", []):
                    engine = b.get("engine") or {}
                    self.samples.append({
                        "t": t, "backend": b["name"], "limit": b["limit"], "in_flight": b["in_flight"],
                        "reason": b.get("limit_reason"), "state": b.get("state"),
                        "running": engine.get("running"), "waiting": engine.get("waiting"),
                        "long_cap": b.get("long_cap"), "borrowed": b.get("borrowed"),
                        "resume_cost": b.get("resume_cost"),
                    })


def write_limit_plot(path: Path, trajectories: dict[str, list[dict[str, Any]]], title: str) -> None:
    """One panel per run: the limit and requests in flight over time, for the first backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from loadtests.plots import save_figure

    runs = [(label, s) for label, s in trajectories.items() if s]
    if not runs:
        return
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.6 * len(runs)), squeeze=False)
    for ax, (label, samples) in zip(axes[:, 0], runs, strict=True):
        first = samples[0]["backend"]
        mine = [s for s in samples if s["backend"] == first]
        ts = [s["t"] for s in mine]
        ax.step(ts, [s["limit"] for s in mine], where="post", label="limit")
        ax.plot(ts, [s["in_flight"] for s in mine], label="in flight", alpha=0.7)
        waiting = [s["waiting"] for s in mine]
        if any(w is not None for w in waiting):
            ax.plot(ts, [w or 0 for w in waiting], label="engine waiting", alpha=0.7)
        ax.set_yscale("symlog", linthresh=10)
        ax.set_title(f"{label} ({first})", fontsize=9)
        ax.set_xlabel("seconds")
        ax.legend(fontsize=8, loc="upper right")
    save_figure(fig, path, title, dpi=90)
