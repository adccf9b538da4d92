"""What the registry keeps per backend: its configuration, what a probe answers, and its
live state (limit, breaker, speed, cool-down). ``registry.py`` does the keeping."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.backends import engines
from scheduler.backends.breaker import Breaker, Health
from scheduler.backends.engine_costs import CostMeter
from scheduler.policy.limits import AdaptiveLimit, LimitParams
from scheduler.policy.reservation import Reservation
from scheduler.types import BackendRecord, ResumeMode


@dataclass(frozen=True, slots=True)
class BackendConfig:
    name: str
    url: str  # base URL, without /v1
    pool: str
    max_concurrency: int
    models: tuple[str, ...] | None = None  # None: discover from /v1/models
    api_key: str | None = None
    weight: float = 1.0
    engine_priority: bool = False  # send the gateway's order as the request's `priority`
    resume: ResumeMode = ResumeMode.NONE  # how it continues a paused generation (none: it is never paused)
    limit: LimitParams | None = None  # None: a static limit of max_concurrency
    engine: str | None = None  # an ``engines.Engine`` value; None: detect it
    concurrency_set: bool = True  # False: max_concurrency is the default, an engine profile may lower it
    priority_order: str = "auto"  # auto (the engine's), lower_first or higher_first

    @property
    def token_resume(self) -> bool:
        """May a paused generation on it continue from token ids (``engines.TOKEN_RESUME``)?"""
        return self.resume in engines.TOKEN_RESUME

    @property
    def ids_ask(self) -> dict[str, Any] | None:
        """The fields that ask its engine for the ids of the tokens it makes (None: it cannot)."""
        return engines.IDS_ASK.get(self.resume)

    @property
    def ids_in_logprobs(self) -> bool:
        """Does its engine tell token ids in ``logprobs``, and not the prompt's (llama.cpp)?"""
        return self.resume in engines.IDS_IN_LOGPROBS

    @property
    def counts_by_timings(self) -> bool:
        """Does a stream on it count its tokens by llama.cpp's ``timings`` (``engines.COUNT_BY_TIMINGS``)?"""
        return self.resume in engines.COUNT_BY_TIMINGS


@dataclass(frozen=True, slots=True)
class ModelList:
    """A backend's ``/v1/models`` answer: its model cards, and its ``server`` header."""

    cards: tuple[dict[str, Any], ...]
    server: str | None = None

    @property
    def ids(self) -> list[str]:
        return [c["id"] for c in self.cards]


class MetricsNotServed(Exception):
    """The backend answers, but has no Prometheus ``/metrics``: don't ask again."""


class Probe(Protocol):
    """Asks one backend how it is."""

    async def models(self, backend: BackendConfig) -> ModelList | None:
        """What its ``/v1/models`` lists; None when it gave no good answer."""
        ...

    async def metrics(self, backend: BackendConfig) -> str | None:
        """Its Prometheus text; None when it could not be had this time (``MetricsNotServed``
        when it has none)."""
        ...


@dataclass(slots=True)
class BackendState:
    config: BackendConfig
    limiter: AdaptiveLimit
    reservation: Reservation
    breaker: Breaker
    models: set[str] = field(default_factory=set)
    errors_total: int = 0
    in_flight: int = 0  # leases held on it, all replicas (read from Redis each probe)
    borrowed: int = 0
    speed: float = 0.0  # per-sequence decode tokens/s (EWMA)
    ttft: deque[float] = field(default_factory=lambda: deque(maxlen=200))
    tpot: deque[float] = field(default_factory=lambda: deque(maxlen=200))
    has_metrics: bool | None = None  # None: not tried yet
    profile: engines.EngineProfile = engines.NEUTRAL
    costs: CostMeter = field(default_factory=CostMeter)  # what a resume costs it
    engine_source: str = "default"  # configured, or what it was detected from (metrics, owned_by, ...)
    cards: dict[str, dict[str, Any]] = field(default_factory=dict)  # model id -> its /v1/models card
    cool_until: float = 0.0  # (monotonic) it answered 429/503: no grants before this
    down_since: float | None = None  # (monotonic) when its breaker last opened
    _cool_timer: asyncio.TimerHandle | None = None

    @property
    def cooling(self) -> bool:
        return time.monotonic() < self.cool_until

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def health(self) -> Health:
        return self.breaker.health

    @property
    def healthy(self) -> bool:
        return self.health is not Health.DOWN

    @property
    def limit(self) -> int:
        return 1 if self.health is Health.PROBING else self.limiter.limit

    def record(self) -> BackendRecord:
        limit = self.limit
        return BackendRecord(
            name=self.name, limit=limit, down=not self.healthy or self.cooling, models=tuple(sorted(self.models)),
            weight=self.config.weight, speed=self.speed * limit,
            long_cap=self.reservation.long_cap(limit), borrow=self.reservation.borrow(limit),
            resume=self.config.resume is not ResumeMode.NONE,
            cost=self.costs.cost(statistics.median(self.tpot) if self.tpot else None),
        )
