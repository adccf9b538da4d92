"""Relay throughput, client side: ``concurrency`` long streams at once, each one
re-sent as soon as it ends, for ``warmup_s + duration_s``.

The chunk rate is counted from the tokens received between the end of the warm-up
and the end of the run (finished and running streams alike). ITL samples are the
gaps of streams sent after the warm-up. At the end the remaining streams are closed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from loadtests.overhead.httpclient import Exchange
from loadtests.overhead.openloop import Connections, LoadSpec, _cpu_s
from loadtests.overhead.stats import summarize_ns


@dataclass(frozen=True, slots=True)
class RelaySpec:
    host: str
    port: int
    path: str
    body: bytes
    concurrency: int
    duration_s: float
    warmup_s: float = 1.0


async def run_relay(spec: RelaySpec) -> dict[str, Any]:
    load = LoadSpec(spec.host, spec.port, spec.path, spec.body, rate=1.0, duration_s=spec.duration_s,
                    max_connections=spec.concurrency)
    finished: list[Exchange] = []
    running = [True]
    counter = [0]
    conns: Connections

    def on_done(ex: Exchange) -> None:
        finished.append(ex)
        if running[0] and not ex.error:
            counter[0] += 1
            conns.send(Exchange(counter[0], time.perf_counter_ns(), keep_gaps=True, keep_body=False))

    conns = Connections(load, on_done)
    await conns.preopen(spec.concurrency)
    for i in range(spec.concurrency):
        counter[0] = i
        conns.send(Exchange(i, time.perf_counter_ns(), keep_gaps=True, keep_body=False))

    def tokens_now() -> int:
        return sum(ex.tokens for ex in finished) + sum(ex.tokens for ex in conns.in_flight())

    await asyncio.sleep(spec.warmup_s)
    t_warm, tok_warm, cpu_warm = time.perf_counter_ns(), tokens_now(), _cpu_s()
    await asyncio.sleep(spec.duration_s)
    t_end, tok_end, cpu_end = time.perf_counter_ns(), tokens_now(), _cpu_s()
    running[0] = False
    measured = [ex for ex in finished + conns.in_flight() if ex.sent_ns >= t_warm]
    # every failed stream counts, the warm-up's too: a failed stream is not replaced (no
    # hot loop against a refusing target), so one lost in the warm-up leaves the level short
    errors = [ex for ex in finished if ex.error]
    conns.close()
    window_s = (t_end - t_warm) / 1e9
    gaps = [g for ex in measured if ex.gaps for g in ex.gaps]
    return {
        "concurrency": spec.concurrency,
        "chunks_per_s": (tok_end - tok_warm) / window_s,
        "itl_ms": summarize_ns(gaps),
        "ttft_ms": summarize_ns([ex.first_ns - ex.sent_ns for ex in measured if ex.first_ns]),
        "errors": len(errors),
        "generator_cpu_pct": 100.0 * (cpu_end - cpu_warm) / window_s,
    }
