"""Adaptive concurrency: how many requests may a backend run at once, right now?

An AIMD controller in the spirit of Netflix's concurrency-limits and Envoy's adaptive
concurrency filter, fed by three kinds of signal:

1. **Overload** answers from the backend (429/503): multiplicative decrease (x0.7).
2. **The engine's own queue**, when it exposes Prometheus metrics (vLLM
   ``vllm:num_requests_waiting``, SGLang ``sglang:num_queue_reqs``, TGI
   ``tgi_queue_size``, llama.cpp ``llamacpp:requests_deferred``; each engine's names are
   in ``scheduler/backends/engines.py``): a backend that queues requests inside holds work the gateway
   could have reordered, so the limit falls to what the engine really runs, plus one.
   A KV cache nearly full counts the same.
3. **Latency against targets**: when the p90 TTFT or the median time per output token
   of the last window misses its target while the backend is busy, decrease (x0.9) —
   by default only for a backend whose own queue the gateway cannot see (no metrics):
   there a slow first token is the only sign of requests queued inside it. Where the
   engine's queue is seen and empty, a slower step is the price of a fuller batch, and
   cutting the limit for it trades the engine's throughput for latency (a CPU engine
   sharing its cores missed both default targets at half its slots, and the gateway held
   it at 4 of 8 with 0.65x the throughput of clients sent straight to it). That trade is
   ``latency_always``'s to make.

With none of those and the gateway using the whole limit, the limit grows by one per
tick (additive increase), between ``floor`` and ``ceiling``. The point: keep each
backend as full as throughput needs and no fuller, so the queue stays at the gateway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LimitParams:
    initial: int
    floor: int = 1
    ceiling: int = 1024
    adaptive: bool = True
    ttft_target_s: float | None = 1.0  # p90 time to first token
    tpot_target_s: float | None = 0.1  # median time per output token
    overload_factor: float = 0.7
    latency_factor: float = 0.9
    latency_always: bool = False  # latency cuts the limit even where the engine's queue is seen
    queue_tolerance: float = 0.05  # engine queue allowed, as a share of its running requests
    kv_high: float = 0.97  # KV cache usage treated as full


@dataclass(slots=True)
class EngineLoad:
    """A sample of the engine's own metrics."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1


@dataclass(slots=True)
class AdaptiveLimit:
    params: LimitParams
    limit: int = 0
    last_reason: str = "configured"
    _ttft: list[float] = field(default_factory=list)
    _tpot: list[float] = field(default_factory=list)
    _overloads: int = 0
    _peak_in_flight: int = 0
    engine: EngineLoad = field(default_factory=EngineLoad)

    def __post_init__(self) -> None:
        p = self.params
        self.limit = max(p.floor, min(p.ceiling, p.initial))

    # -- signals -----------------------------------------------------------------
    def on_success(self, ttft_s: float | None, tpot_s: float | None) -> None:
        if ttft_s is not None:
            self._ttft.append(ttft_s)
        if tpot_s is not None:
            self._tpot.append(tpot_s)

    def on_overload(self) -> None:
        self._overloads += 1

    def on_in_flight(self, in_flight: int) -> None:
        self._peak_in_flight = max(self._peak_in_flight, in_flight)

    def on_engine(self, load: EngineLoad) -> None:
        self.engine = load

    # -- decision ----------------------------------------------------------------
    def tick(self) -> bool:
        """Apply what the last window showed. Returns True when the limit changed."""
        if not self.params.adaptive:
            self._reset()
            return False
        before = self.limit
        new, reason = self._decide()
        p = self.params
        self.limit = max(p.floor, min(p.ceiling, new))
        if self.limit != before:
            self.last_reason = reason
        self._reset()
        return self.limit != before

    def _decide(self) -> tuple[int, str]:
        p, limit = self.params, self.limit
        if self._overloads:
            return math.floor(limit * p.overload_factor), "backend answered 429/503"
        e = self.engine
        if e.waiting is not None and e.running is not None:
            if e.waiting > max(1.0, p.queue_tolerance * e.running):
                return min(limit - 1, int(e.running) + 1), "engine is queueing"
        if e.kv_usage is not None and e.kv_usage >= p.kv_high and e.waiting:
            return limit - 1, "engine KV cache full"
        queue_unseen = e.waiting is None  # latency is then the only sign of a queue inside
        by_latency = self._peak_in_flight >= 0.8 * limit and (p.latency_always or queue_unseen)
        if by_latency and p.ttft_target_s is not None and _quantile(self._ttft, 0.9) > p.ttft_target_s:
            return math.floor(limit * p.latency_factor), "TTFT above target"
        if by_latency and p.tpot_target_s is not None and _quantile(self._tpot, 0.5) > p.tpot_target_s:
            return math.floor(limit * p.latency_factor), "TPOT above target"
        if self._peak_in_flight >= limit:
            engine_has_room = e.waiting is None or e.waiting == 0
            if engine_has_room:
                return limit + 1, "probing for more"
        return limit, self.last_reason

    def _reset(self) -> None:
        self._ttft.clear()
        self._tpot.clear()
        self._overloads = 0
        self._peak_in_flight = 0


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile of a window (nearest rank); 0 for an empty window."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
