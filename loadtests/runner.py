"""Running a load: send planned requests on schedule (or closed loop), bounded by count and time.

A run sends for at most ``duration_s`` and at most ``max_requests`` requests, then
waits up to ``drain_s`` for what is in flight, then cancels the rest (their records
say ``cancelled``). Nothing here waits on anything but the schedule and the requests.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from loadtests.client import RequestRecord, Sender, Target, cancelled
from loadtests.requests import PlannedRequest

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Limits:
    duration_s: float = 60.0  # sending window
    max_requests: int | None = None  # requests sent, warm-up included
    drain_s: float = 60.0  # after the window: wait this long for in-flight requests, then cancel

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.drain_s < 0:
            raise ValueError("duration_s must be > 0 and drain_s >= 0")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError("max_requests must be >= 1")


@dataclass(frozen=True, slots=True)
class RunResult:
    records: list[RequestRecord]
    wall_s: float  # from the first send to the end of the drain


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on uvloop when it is installed (less client-side lag), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def http_client(timeout_s: float) -> httpx.AsyncClient:
    # trust_env=False: no proxy variables may divert loopback traffic
    return httpx.AsyncClient(
        limits=httpx.Limits(max_connections=4096, max_keepalive_connections=1024),
        timeout=httpx.Timeout(timeout_s, connect=10.0),
        trust_env=False,
    )


class _Run:
    def __init__(self, sender: Sender, t0: float, on_record: Callable[[RequestRecord], None] | None) -> None:
        self.sender = sender
        self.t0 = t0
        self.records: list[RequestRecord] = []
        self.on_record = on_record

    async def one(self, req: PlannedRequest) -> None:
        start_s = time.perf_counter() - self.t0
        try:
            record = await self.sender.send(req)
        except asyncio.CancelledError:
            self.records.append(cancelled(req, start_s, self.t0))
            raise
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)


async def _finish(tasks: set[asyncio.Task[None]], until: float) -> None:
    pending = {t for t in tasks if not t.done()}
    if pending:
        _, pending = await asyncio.wait(pending, timeout=max(0.0, until - time.perf_counter()))
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


async def run_open_loop(target: Target, requests: Iterable[PlannedRequest], limits: Limits,
                        on_record: Callable[[RequestRecord], None] | None = None) -> RunResult:
    """Send each request at its ``at_s`` offset, whatever the server does."""
    async with http_client(target.timeout_s) as client:
        t0 = time.perf_counter()
        run = _Run(Sender(client, target, t0), t0, on_record)
        tasks: set[asyncio.Task[None]] = set()
        for n, req in enumerate(requests):
            if req.at_s is None:
                raise ValueError("open-loop requests need a send offset")
            if req.at_s > limits.duration_s or (limits.max_requests is not None and n >= limits.max_requests):
                break
            delay = t0 + req.at_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule itself, not a synchronisation
            tasks.add(asyncio.create_task(run.one(req)))
        await _finish(tasks, t0 + limits.duration_s + limits.drain_s)
        return RunResult(run.records, time.perf_counter() - t0)


async def run_closed_loop(target: Target, requests: Iterator[PlannedRequest], concurrency: int,
                          limits: Limits, on_record: Callable[[RequestRecord], None] | None = None) -> RunResult:
    """``concurrency`` clients, each sending its next request as soon as its last one ends."""
    async with http_client(target.timeout_s) as client:
        t0 = time.perf_counter()
        run = _Run(Sender(client, target, t0), t0, on_record)
        counter = itertools.count()

        async def client_loop() -> None:
            while True:
                n = next(counter)
                if (limits.max_requests is not None and n >= limits.max_requests) or (
                    time.perf_counter() - t0 >= limits.duration_s
                ):
                    return
                req = next(requests, None)
                if req is None:
                    return
                await run.one(req)

        tasks = {asyncio.create_task(client_loop()) for _ in range(concurrency)}
        await _finish(tasks, t0 + limits.duration_s + limits.drain_s)
        return RunResult(run.records, time.perf_counter() - t0)
