"""Arrival traces: Azure LLM inference 2023 (CSV) and Mooncake FAST'25 (JSONL).

Both become ``TraceRow`` values: seconds since the trace's first request, input and
output tokens. The Mooncake conversation trace's timestamps are quantised (to about
3 s, so most gaps are 0): when most gaps are zero, each group of equal timestamps is
spread uniformly (seeded) over the modal gap between distinct timestamps, which gives
sub-second arrivals without changing the per-bucket counts.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson


class TraceError(Exception):
    """A trace file that cannot be read, as one line."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    t_s: float  # seconds after the first request of the trace
    input_tokens: int
    output_tokens: int


def _azure_time(text: str) -> float:
    # "2023-11-16 18:15:46.6805900": 7 fractional digits, which strptime's %f refuses
    whole, _, frac = text.strip().partition(".")
    base = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float(f"0.{frac}") if frac else 0.0)


def parse_azure(lines: Iterable[str]) -> list[TraceRow]:
    """Rows of an Azure 2023 trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``)."""
    it = iter(lines)
    header = next(it, "").strip().split(",")
    if header[:3] != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
        raise TraceError("azure trace: header must be TIMESTAMP,ContextTokens,GeneratedTokens")
    raw: list[tuple[float, int, int]] = []
    for n, line in enumerate(it, start=2):
        if not line.strip():
            continue
        try:
            ts, ctx, gen = line.strip().split(",")[:3]
            raw.append((_azure_time(ts), int(ctx), int(gen)))
        except ValueError:
            raise TraceError(f"azure trace: line {n} is not TIMESTAMP,ContextTokens,GeneratedTokens") from None
    return _rebase(raw)


def parse_mooncake(lines: Iterable[str | bytes], seed: int = 0) -> list[TraceRow]:
    """Rows of a Mooncake trace (JSONL: ``timestamp`` ms, ``input_length``, ``output_length``)."""
    raw: list[tuple[float, int, int]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
            raw.append((float(obj["timestamp"]) / 1000.0, int(obj["input_length"]), int(obj["output_length"])))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise TraceError(f"mooncake trace: line {n} lacks timestamp/input_length/output_length") from None
    raw.sort(key=lambda r: r[0])
    t0 = raw[0][0] if raw else 0.0  # the bucket grid stays where the trace put it
    return _rebase(spread_quantised(raw, random.Random(seed)), t0)


def spread_quantised(rows: list[tuple[float, int, int]], rng: random.Random) -> list[tuple[float, int, int]]:
    """Spread groups of equal timestamps over the quantum, when the trace is quantised."""
    if len(rows) < 3:
        return rows
    gaps = [b[0] - a[0] for a, b in zip(rows, rows[1:], strict=False)]
    if sum(1 for g in gaps if g == 0) < len(gaps) / 2:
        return rows
    distinct_gaps = [round(g, 3) for g in gaps if g > 0]
    if not distinct_gaps:
        return rows
    quantum = Counter(distinct_gaps).most_common(1)[0][0]
    out: list[tuple[float, int, int]] = []
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][0] == rows[i][0]:
            j += 1
        offsets = sorted(rng.uniform(0.0, quantum) for _ in range(j - i))
        out.extend((rows[i][0] + off, r[1], r[2]) for off, r in zip(offsets, rows[i:j], strict=True))
        i = j
    return out


def _rebase(raw: list[tuple[float, int, int]], t0: float | None = None) -> list[TraceRow]:
    if not raw:
        return []
    raw = sorted(raw, key=lambda r: r[0])
    t0 = raw[0][0] if t0 is None else t0
    return [TraceRow(t - t0, max(1, i), max(1, o)) for t, i, o in raw]


def load_trace(path: Path, fmt: str, seed: int = 0) -> list[TraceRow]:
    try:
        with path.open("r", encoding="utf-8") as fh:
            return parse_azure(fh) if fmt == "azure" else parse_mooncake(fh, seed)
    except OSError as exc:
        raise TraceError(f"trace file {path}: {exc.strerror}") from None


def window(rows: list[TraceRow], offset_s: float = 0.0, time_scale: float = 1.0) -> list[TraceRow]:
    """The rows from ``offset_s`` on, rebased to 0, with times multiplied by ``time_scale``."""
    picked = [r for r in rows if r.t_s >= offset_s]
    if not picked:
        return []
    t0 = picked[0].t_s
    return [TraceRow((r.t_s - t0) * time_scale, r.input_tokens, r.output_tokens) for r in picked]


def mean_rate(rows: list[TraceRow]) -> float:
    """Requests per second over the span of ``rows`` (0 when it has no span)."""
    if len(rows) < 2 or rows[-1].t_s <= rows[0].t_s:
        return 0.0
    return (len(rows) - 1) / (rows[-1].t_s - rows[0].t_s)
