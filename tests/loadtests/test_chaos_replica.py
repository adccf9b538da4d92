"""The traced replica's snapshots: the first is the baseline, each later one a JSON line
of growth since then (run here on the test process, not on a gateway)."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from pathlib import Path

from loadtests.chaos.replica import TOP, _dump


def test_each_line_is_growth_since_the_first_snapshot(tmp_path: Path) -> None:
    out = tmp_path / "replica.tracemalloc.jsonl"
    stop = threading.Event()
    tracemalloc.start(1)
    kept: list[bytes] = []
    try:
        thread = threading.Thread(target=_dump, args=(out, 0.05, stop), daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= 1):
            kept.append(bytes(100_000))  # grows after the baseline
            time.sleep(0.05)
        stop.set()
        thread.join(5)
    finally:
        tracemalloc.stop()
    record = json.loads(out.read_text().splitlines()[0])
    assert record["t_s"] >= 0.1  # none at the first tick: that snapshot is the baseline
    assert 0 < len(record["top_lines"]) <= TOP and len(record["top_files"]) <= TOP
    assert record["top_lines"][0]["kb_diff"] > 0  # sorted by growth, largest first
    assert all(not line["site"].startswith(tracemalloc.__file__) for line in record["top_lines"])
