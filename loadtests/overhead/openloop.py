"""The open-loop generator: requests leave on a fixed schedule, whatever came back.

A closed loop (N clients, each waiting for its answer) slows down with the target
and so hides queueing; here request ``i`` is due at ``t0 + i / rate`` and is sent
then, on an idle keep-alive connection or a new one (up to ``max_connections``).
The schedule's own slip (``lateness``: sent minus due) is reported, and so is the
generator's CPU share, so a reader can tell when a number is limited by the client:
the event loop's timers tick in milliseconds, so a lateness p50 under ~1 ms is the
timer, and a p99 of many milliseconds or a CPU share near 100 % is a saturated client.

Requests due in the first ``warmup_s`` are sent but not measured. After the last is
sent, those still running get ``drain_s``; then they count as ``timeout`` errors.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from loadtests.overhead.httpclient import Connection, Exchange, encode_request
from loadtests.overhead.stats import summarize_ns


@dataclass(frozen=True, slots=True)
class LoadSpec:
    host: str
    port: int
    path: str
    body: bytes  # the JSON request body, the same for every request
    rate: float  # requests per second
    duration_s: float  # measured part of the schedule
    warmup_s: float = 1.0
    drain_s: float = 10.0
    max_connections: int = 4000
    stream: bool = True
    headers: dict[str, str] = field(default_factory=dict)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Connections:
    """The keep-alive connections to one target: idle ones are reused, more opened on demand."""

    def __init__(self, spec: LoadSpec, on_done: Any) -> None:
        self._spec = spec
        self._on_done = on_done
        self._request = encode_request(spec.host, spec.port, spec.path, spec.body, spec.headers)
        self.idle: set[Connection] = set()
        self.all: set[Connection] = set()
        self.opening = 0
        self.opened = 0

    def _done(self, conn: Connection, ex: Exchange) -> None:
        if not conn.closed:
            self.idle.add(conn)
        self._on_done(ex)

    def _closed(self, conn: Connection) -> None:
        self.idle.discard(conn)
        self.all.discard(conn)

    async def open(self) -> Connection | None:
        loop = asyncio.get_running_loop()
        self.opening += 1
        try:
            _, conn = await loop.create_connection(lambda: Connection(self._done, self._closed),
                                                   self._spec.host, self._spec.port)
        except OSError:
            return None
        finally:
            self.opening -= 1
        self.opened += 1
        self.all.add(conn)
        return conn

    async def preopen(self, count: int) -> None:
        for conn in await asyncio.gather(*(self.open() for _ in range(count))):
            if conn is not None:
                self.idle.add(conn)

    def send(self, ex: Exchange) -> asyncio.Task[None] | None:
        """Send on an idle connection now, or open one; ``None`` when sent at once."""
        if self.idle:
            self.idle.pop().send(self._request, ex)
            return None
        if len(self.all) + self.opening >= self._spec.max_connections:
            ex.error = "no_connection"
            ex.sent_ns = ex.end_ns = time.perf_counter_ns()
            self._on_done(ex)
            return None
        return asyncio.ensure_future(self._open_and_send(ex))

    async def _open_and_send(self, ex: Exchange) -> None:
        conn = await self.open()
        if conn is None:
            ex.error = "connection"
            ex.sent_ns = ex.end_ns = time.perf_counter_ns()
            self._on_done(ex)
            return
        conn.send(self._request, ex)

    def in_flight(self) -> list[Exchange]:
        return [c.exchange for c in self.all if c.exchange is not None]

    def close(self) -> None:
        for conn in list(self.all):
            conn.close()


async def run_openloop(spec: LoadSpec) -> dict[str, Any]:
    """Run the schedule against one target; a summary of the measured requests."""
    finished: list[Exchange] = []
    total = max(1, round(spec.rate * (spec.warmup_s + spec.duration_s)))
    warm = round(spec.rate * spec.warmup_s)
    state = {"pending": 0}
    drained = asyncio.Event()
    sending = [True]

    def on_done(ex: Exchange) -> None:
        finished.append(ex)
        state["pending"] -= 1
        if not sending[0] and state["pending"] <= 0:
            drained.set()

    conns = Connections(spec, on_done)
    await conns.preopen(min(spec.max_connections, int(spec.rate * 0.05) + 8))
    interval_ns = int(1e9 / spec.rate)
    tasks: set[asyncio.Task[None]] = set()
    cpu0, wall0 = _cpu_s(), time.perf_counter_ns()
    t0 = wall0 + 5_000_000
    index = 0
    while index < total:  # bounded: `total` sends, each due at a fixed time
        due = t0 + index * interval_ns
        now = time.perf_counter_ns()
        if due > now:
            await asyncio.sleep((due - now) / 1e9)
            continue
        state["pending"] += 1
        task = conns.send(Exchange(index, due, keep_gaps=spec.stream, keep_body=not spec.stream))
        if task is not None:
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        index += 1
    sending[0] = False
    send_end = time.perf_counter_ns()
    if state["pending"] > 0:
        try:
            await asyncio.wait_for(drained.wait(), spec.drain_s)
        except TimeoutError:
            pass
    for ex in conns.in_flight():
        ex.error, ex.end_ns = "timeout", time.perf_counter_ns()
        finished.append(ex)
    for task in tasks:
        task.cancel()
    unsent = total - len(finished) - len(conns.in_flight())
    cpu1, wall1 = _cpu_s(), time.perf_counter_ns()
    conns.close()
    return summarize(finished, warm, spec, {
        "generator_cpu_pct": 100.0 * (cpu1 - cpu0) / max(1e-9, (wall1 - wall0) / 1e9),
        "schedule_s": (send_end - t0) / 1e9,
        "connections_opened": conns.opened,
        "unsent": max(0, unsent),
        "sent_total": total - max(0, unsent),
    })


def summarize(finished: list[Exchange], warm: int, spec: LoadSpec, extra: dict[str, Any]) -> dict[str, Any]:
    measured = sorted((ex for ex in finished if ex.index >= warm), key=lambda ex: ex.index)
    ok = [ex for ex in measured if not ex.error]
    errors = Counter(ex.error for ex in measured if ex.error)
    sends = sorted(ex.sent_ns for ex in measured if ex.sent_ns)
    span_s = (sends[-1] - sends[0]) / 1e9 if len(sends) > 1 else 0.0
    ends = [ex.end_ns for ex in ok]
    window_s = (max(ends) - sends[0]) / 1e9 if ok and sends else 0.0
    gaps = [g for ex in ok if ex.gaps for g in ex.gaps]
    return {
        "offered_rps": spec.rate,
        "stream": spec.stream,
        "requests": len(measured),
        "ok": len(ok),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "send_rps": (len(sends) - 1) / span_s if span_s > 0 else 0.0,
        "achieved_rps": len(ok) / window_s if window_s > 0 else 0.0,
        "tokens_mean": sum(ex.tokens for ex in ok) / len(ok) if ok else 0.0,
        "lateness_ms": summarize_ns([ex.sent_ns - ex.due_ns for ex in measured if ex.sent_ns]),
        "ttft_ms": summarize_ns([ex.first_ns - ex.sent_ns for ex in ok]),
        "e2e_ms": summarize_ns([ex.end_ns - ex.sent_ns for ex in ok]),
        "itl_ms": summarize_ns(gaps),
        **extra,
    }
