"""The live progress line: requests done, running RPS, output TPS and TTFT p99 (rich).

Shown only on a terminal and without ``--quiet``; otherwise ``Progress.null()`` does nothing.
The numbers are running figures over the last ``window`` completions, for a person watching,
not the report's (which excludes warm-up and reads every record).
"""

from __future__ import annotations

import time
from collections import deque
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.text import Text

from loadtests.client import RequestRecord
from loadtests.metrics import percentile


class Progress:
    def __init__(self, label: str, expected: int | None, duration_s: float, enabled: bool,
                 window: int = 200) -> None:
        self._label = label
        self._expected = expected
        self._duration = duration_s
        self._enabled = enabled
        self._recent: deque[tuple[float, int, float | None]] = deque(maxlen=window)
        self._ok = 0
        self._failed = 0
        self._t0 = time.perf_counter()
        self._live: Live | None = None

    @classmethod
    def null(cls) -> Progress:
        return cls("", None, 1.0, enabled=False)

    def record(self, r: RequestRecord) -> None:
        if r.ok:
            self._ok += 1
            self._recent.append((time.perf_counter(), r.output_tokens, r.ttft_s))
        else:
            self._failed += 1

    def _render(self) -> Text:
        elapsed = time.perf_counter() - self._t0
        rps = tps = 0.0
        p99 = "-"
        if len(self._recent) >= 2:
            span = max(1e-6, self._recent[-1][0] - self._recent[0][0])
            rps = (len(self._recent) - 1) / span
            tps = sum(t for _, t, _ in list(self._recent)[1:]) / span
            ttfts = sorted(t for _, _, t in self._recent if t is not None)
            p99 = f"{percentile(ttfts, 99) * 1000:.0f} ms" if ttfts else "-"
        done = f"{self._ok}" + (f"/{self._expected}" if self._expected else "")
        frac = min(1.0, elapsed / self._duration)
        bar = "█" * int(frac * 20) + "░" * (20 - int(frac * 20))
        return Text(f"{self._label} {bar} {elapsed:5.0f}s  ok {done}  failed {self._failed}  "
                    f"RPS {rps:6.2f}  TPS {tps:8.0f}  TTFT p99 {p99}")

    def __enter__(self) -> Progress:
        self._t0 = time.perf_counter()
        if self._enabled:
            console = Console(stderr=True)
            if console.is_terminal:
                self._live = Live(get_renderable=self._render, console=console, refresh_per_second=4,
                                  transient=True)
                self._live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
