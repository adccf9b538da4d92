"""Sampling a target under load with py-spy, and the hot spots of what it saw.

``py-spy record --format raw`` writes collapsed stacks (``frame;frame;... count``),
frames as ``function (file:line)``. Idle samples (a thread waiting in the event
loop's poll) are not recorded, so shares are of the samples where the process was
running Python. ``--nonblocking`` keeps py-spy from pausing the target to read it.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


@dataclass(frozen=True, slots=True)
class HotSpot:
    frame: str  # function (file), line numbers dropped
    self_pct: float  # share of samples with this frame on top
    total_pct: float  # share of samples with this frame anywhere on the stack


def start_record(py_spy: str, pid: int, seconds: float, out: Path, rate: int = 200) -> subprocess.Popen[bytes]:
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [py_spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))), "--rate", str(rate),
           "--format", "raw", "--nonblocking", "--output", str(out)]
    log = (out.parent / (out.name + ".log")).open("ab")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def finish(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


def _frame(raw: str) -> str:
    return _LINE.sub(")", raw.strip())


def hot_spots(collapsed: Path, top: int = 20) -> tuple[int, list[HotSpot]]:
    """Total samples, and the ``top`` frames by self share (then by total share)."""
    selfs: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    samples = 0
    for line in collapsed.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        samples += n
        selfs[frames[-1]] += n
        for f in set(frames):
            totals[f] += n
    if not samples:
        return 0, []
    ranked = sorted(selfs, key=lambda f: (-selfs[f], -totals[f]))[:top]
    return samples, [HotSpot(f, 100.0 * selfs[f] / samples, 100.0 * totals[f] / samples) for f in ranked]


def inclusive(collapsed: Path, needles: list[str]) -> dict[str, float]:
    """Share of samples whose stack has a frame containing each needle (e.g. a module path)."""
    hits: Counter[str] = Counter()
    samples = 0
    for line in collapsed.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples += int(count)
        for needle in needles:
            if needle in stack:
                hits[needle] += int(count)
    return {n: (100.0 * hits[n] / samples if samples else 0.0) for n in needles}
