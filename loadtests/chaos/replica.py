"""A gateway replica that traces its own allocations: ``python -m loadtests.chaos.replica
CONFIG OUT EVERY_S``. Like ``triage serve --config CONFIG``, with ``tracemalloc`` on; every
``EVERY_S`` seconds one line of JSON goes to ``OUT``: the traced total and the allocation
sites that grew most since the first snapshot (taken ``EVERY_S`` after start-up)."""

from __future__ import annotations

import sys
import threading
import time
import tracemalloc
from pathlib import Path

import orjson

TOP = 25


def _line(stat: tracemalloc.StatisticDiff) -> dict[str, object]:
    frame = stat.traceback[0]
    return {"site": f"{frame.filename}:{frame.lineno}", "kb": round(stat.size / 1024, 1),
            "kb_diff": round(stat.size_diff / 1024, 1), "count_diff": stat.count_diff}


def _dump(out: Path, every_s: float, stop: threading.Event) -> None:
    started = time.monotonic()
    baseline: tracemalloc.Snapshot | None = None
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    while not stop.wait(every_s):
        snapshot = tracemalloc.take_snapshot().filter_traces(ignore)
        if baseline is None:
            baseline = snapshot
            continue
        by_line = snapshot.compare_to(baseline, "lineno")
        by_file = snapshot.compare_to(baseline, "filename")
        traced, peak = tracemalloc.get_traced_memory()
        record = {
            "t_s": round(time.monotonic() - started, 1), "traced_mb": round(traced / 2**20, 2),
            "peak_mb": round(peak / 2**20, 2),
            "top_lines": [_line(s) for s in by_line[:TOP]],
            "top_files": [_line(s) for s in by_file[:TOP]],
        }
        with out.open("ab") as f:
            f.write(orjson.dumps(record) + b"\n")


def main() -> None:
    config, out, every_s = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    tracemalloc.start(1)
    stop = threading.Event()
    threading.Thread(target=_dump, args=(out, every_s, stop), daemon=True, name="tracemalloc").start()
    from gateway.serve import run
    from gateway.settings import load_settings

    try:
        run(load_settings(config))
    finally:
        stop.set()


if __name__ == "__main__":
    main()
