"""The backends a replica knows: models, health, limits and speed, mirrored into Redis.

Each probe round asks every backend for ``/v1/models`` (health and models at once)
and, when it has them, its Prometheus ``/metrics`` (its own queue and KV cache),
ticks each adaptive limit, and writes the result into the pool's Redis keys through
``backend.lua``. That write is idempotent, so it also restores the registry after
Redis lost its data. The asking itself is a ``Probe``'s (HTTP, in
``gateway/upstream/probe.py``); health follows from the answers through each
backend's circuit breaker (``breaker.py``): a backend coming back gets a trickle of
one slot until it has answered well ``recover_successes`` times. A backend that
answers 429/503 (overloaded) is not broken: its limit is cut and it *cools down* for
its ``Retry-After`` (``cool_down``), published as down meanwhile, so it gets no grants.
The same answers say which engine it is, unless configured (``engines.py``: metric
names, priority direction, a starting limit), and which model names it serves (``names.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from typing import Any

from redis.exceptions import RedisError

from scheduler import tasks
from scheduler.backends import engine_metrics, engines, names
from scheduler.backends.backend import BackendConfig, BackendState, MetricsNotServed, Probe
from scheduler.backends.breaker import Breaker, Health
from scheduler.policy.limits import AdaptiveLimit, LimitParams
from scheduler.policy.reservation import Reservation, ReservationParams
from scheduler.queue.dispatcher import Dispatcher
from scheduler.types import BackendRecord

log = logging.getLogger("triage.backends")




class BackendRegistry:
    def __init__(
        self,
        configs: Iterable[BackendConfig],
        probe: Probe,
        dispatcher: Dispatcher,
        probe_interval_s: float,
        reservation: ReservationParams | None = None,
        fail_threshold: int = 3,
        recover_successes: int = 3,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self._probe_backend = probe
        self.aliases = dict(aliases or {})
        self._dispatcher = dispatcher
        self._interval = probe_interval_s
        configs = list(configs)
        self.reservations: dict[str, Reservation] = {}
        for pool in {c.pool for c in configs}:
            size = sum(1 for c in configs if c.pool == pool)
            self.reservations[pool] = Reservation(reservation or ReservationParams(), size)
        self._reservation_params = reservation or ReservationParams()
        self._breaker = (fail_threshold, recover_successes)
        self.backends: dict[str, BackendState] = {}
        for c in configs:
            self.backends[c.name] = self._state(c)
        self.retired: dict[str, BackendConfig] = {}  # removed by a reload; requests on them finish
        self._probes = tasks.Periodic(probe_interval_s, self.probe_all, "backend probe", log=log)
        self._unserved: dict[str, asyncio.Future[None]] = {}  # model -> done when none may serve it

    def _state(self, c: BackendConfig) -> BackendState:
        params = c.limit or LimitParams(initial=c.max_concurrency, adaptive=False, ceiling=c.max_concurrency)
        state = BackendState(
            c, AdaptiveLimit(params), self.reservations[c.pool], Breaker(*self._breaker), set(c.models or ()),
        )
        if c.engine is not None:
            _apply_profile(state, engines.Engine(c.engine), "configured")
        return state

    def config_of(self, name: str) -> BackendConfig:
        """A backend's config, also of one a reload removed while a request still ran on it."""
        state = self.backends.get(name)
        return state.config if state is not None else self.retired[name]

    async def reconcile(self, configs: Iterable[BackendConfig]) -> list[str]:
        """Make the backends those of a reloaded config; returns what changed, in words.

        A removed backend is published as down (no new grants; running requests finish on
        it); a new one is probed at once; a changed one keeps its health and statistics and
        takes the new settings (a new limit starts from the new ``max_concurrency``)."""
        wanted = {c.name: c for c in configs}
        changes: list[str] = []
        for name in [n for n in self.backends if n not in wanted]:
            state = self.backends.pop(name)
            self.retired[name] = state.config
            gone = BackendRecord(name=name, limit=0, down=True, models=(), weight=state.config.weight)
            try:
                await self._dispatcher.publish_backend(state.config.pool, gone)
            except RedisError as exc:
                log.warning("could not retire backend %s: %s", name, exc)
            changes.append(f"removed backend {name}")
        for name, c in wanted.items():
            old = self.backends.get(name)
            if old is not None and old.config == c:
                continue
            if c.pool not in self.reservations:
                self.reservations[c.pool] = Reservation(self._reservation_params, 1)
                self._dispatcher.add_pool(c.pool)
            if old is None:
                state = self._state(c)
                changes.append(f"added backend {name}")
            else:
                state = self._state(c)
                state.breaker, state.errors_total, state.speed = old.breaker, old.errors_total, old.speed
                state.ttft, state.tpot, state.has_metrics = old.ttft, old.tpot, old.has_metrics
                if c.models is None:
                    state.models = old.models
                changes.append(f"changed backend {name}")
            self.retired.pop(name, None)
            self.backends[name] = state
            await self._probe(state)
        self._changed()
        return changes

    def unserved(self, model: str) -> asyncio.Future[None]:
        """Done at the first probe round, reload or change of health after which no healthy
        backend serves the model (all down, or none configured): its waiters then check
        whether to give up. One future per model, however many wait on it."""
        future = self._unserved.get(model)
        if future is None or future.done():
            future = self._unserved[model] = asyncio.get_running_loop().create_future()
        return future

    def _changed(self) -> None:
        for model, future in list(self._unserved.items()):
            if future.done() or self.pool_of(model) is None or self.down_for(model) is not None:
                del self._unserved[model]
                if not future.done():
                    future.set_result(None)

    @property
    def probe_interval_s(self) -> float:
        return self._interval

    def models(self) -> list[str]:
        return sorted({m for b in self.backends.values() for m in b.models})

    def resolve(self, model: str) -> str | None:
        """The served model a requested name stands for (aliases, Ollama's ``:latest``)."""
        if any(model in b.models for b in self.backends.values()):
            return model  # the common case, without building the set
        served = {m for b in self.backends.values() for m in b.models}
        return names.resolve(model, served, self.aliases)

    def cards(self) -> list[dict[str, Any]]:
        """Every served model once, with the fields its first backend (config order) gave."""
        seen: dict[str, dict[str, Any]] = {}
        for b in self.backends.values():
            for m in sorted(b.models):
                if m not in seen:
                    seen[m] = b.cards.get(m) or {"id": m}
        return [seen[m] for m in sorted(seen)]

    def priority_for(self, name: str, priority: int) -> int | None:
        """The ``priority`` field to send a backend for the gateway's order (lower first),
        in the engine's direction; None for an engine that reads no such field."""
        b = self.backends.get(name)
        if b is None:  # removed by a reload while a request still runs on it
            config = self.config_of(name)
            profile = engines.profile(config.engine) if config.engine is not None else engines.NEUTRAL
            return engines.priority_value(profile, config.priority_order, priority)
        return engines.priority_value(b.profile, b.config.priority_order, priority)

    def pool_of(self, model: str) -> str | None:
        for b in self.backends.values():
            if model in b.models:
                return b.config.pool
        return None

    def alternatives(self, model: str, failed: str) -> bool:
        """Is there another healthy backend for this model?"""
        return any(b.name != failed and b.healthy and model in b.models for b in self.backends.values())

    def ready_in(self, model: str) -> float | None:
        """How soon may a backend of this model take work? 0: now; the seconds until the
        first cool-down ends when every healthy one is cooling; None: none is healthy."""
        now = time.monotonic()
        waits = [max(0.0, b.cool_until - now) for b in self.backends.values() if b.healthy and model in b.models]
        return min(waits) if waits else None

    def down_for(self, model: str) -> float | None:
        """How long has every backend of this model been down (circuit open)? None while
        one is not."""
        serving = [b for b in self.backends.values() if model in b.models]
        if not serving or any(b.healthy for b in serving):
            return None
        now = time.monotonic()
        return now - max(now if b.down_since is None else b.down_since for b in serving)

    async def cool_down(self, name: str, seconds: float) -> None:
        """The backend answered that it is overloaded: no grants for ``seconds`` (it is
        published as down meanwhile, and published again when the cool-down ends, which
        dispatches the queue into it). A later, longer cool-down extends it. Returns once
        the pool knows, so a ticket queued next cannot be granted it."""
        backend = self.backends.get(name)
        if backend is None or seconds <= 0:
            return
        until = time.monotonic() + seconds
        if until <= backend.cool_until:
            return
        backend.cool_until = until
        loop = asyncio.get_running_loop()
        if backend._cool_timer is not None:
            backend._cool_timer.cancel()

        def over() -> None:  # the loop may run a timer a clock tick early: end it exactly
            if backend.cool_until == until:
                backend.cool_until = 0.0
            loop.create_task(self.publish(backend))

        backend._cool_timer = loop.call_later(seconds, over)
        await self.publish(backend)

    def serves(self, model: str) -> bool:
        """Is a healthy backend serving this model?"""
        return any(b.healthy and model in b.models for b in self.backends.values())

    def down(self) -> list[str]:
        """The backends that are down now, by name."""
        return [b.name for b in self.backends.values() if not b.healthy]

    def any_healthy(self) -> bool:
        return any(b.healthy for b in self.backends.values())

    async def start(self) -> None:
        await self.probe_all()
        self._probes.start()

    async def stop(self) -> None:
        await self._probes.stop()
        for b in self.backends.values():
            if b._cool_timer is not None:
                b._cool_timer.cancel()

    async def probe_all(self) -> None:
        for pool, reservation in self.reservations.items():
            reservation.tick(self._interval)
            self._dispatcher.quiet[pool] = reservation.quiet
        await self._read_in_flight()
        await asyncio.gather(*(self._probe(b) for b in self.backends.values()))
        self._changed()

    async def _read_in_flight(self) -> None:
        for pool in {b.config.pool for b in self.backends.values()}:
            try:
                busy, borrowed = await self._dispatcher.occupancy(pool)
            except RedisError:
                continue
            for b in self.backends.values():
                if b.config.pool == pool:
                    b.in_flight, b.borrowed = busy.get(b.name, 0), borrowed.get(b.name, 0)
                    b.limiter.on_in_flight(b.in_flight)
            if self.reservations[pool].params.enabled:
                try:
                    self.reservations[pool].replicas = await self._dispatcher.replicas(pool)
                except RedisError:
                    pass

    async def _probe(self, backend: BackendState) -> None:
        listing = await self._probe_backend.models(backend.config)
        ok = listing is not None
        metrics: str | None = None
        if listing is not None:
            backend.cards = {c["id"]: c for c in listing.cards}
            if backend.config.models is None:
                backend.models = set(listing.ids)
        if ok and backend.has_metrics is not False and backend.profile.metrics:
            metrics = await self._scrape(backend)
        if listing is not None and backend.profile.engine is None:
            owners = [str(c.get("owned_by", "")) for c in listing.cards]
            found = engines.detect(metrics, owners, listing.server)
            if found is not None:
                _apply_profile(backend, *found)
                log.info("backend %s is %s (from its %s)", backend.name, found[0].value, found[1])
                if metrics is not None:
                    backend.limiter.on_engine(engine_metrics.parse(metrics, backend.profile))
                    backend.costs.observe(metrics)
        self._record(backend, ok)
        before = backend.limiter.limit
        if backend.limiter.tick():
            log.info("backend %s limit %d -> %d: %s", backend.name, before, backend.limiter.limit,
                     backend.limiter.last_reason)
        await self.publish(backend)

    async def _scrape(self, backend: BackendState) -> str | None:
        try:
            text = await self._probe_backend.metrics(backend.config)
        except MetricsNotServed:
            backend.has_metrics = False  # an engine without metrics: don't ask again
            return None
        if text is not None:
            backend.has_metrics = True
            backend.limiter.on_engine(engine_metrics.parse(text, backend.profile))
            backend.costs.observe(text)
        return text

    def _record(self, backend: BackendState, ok: bool) -> None:
        before = backend.health
        after = backend.breaker.observe(ok)
        if after is not Health.DOWN:
            backend.down_since = None
        elif backend.down_since is None:
            backend.down_since = time.monotonic()
        if after is not before and after is Health.DOWN:
            log.warning("backend %s is down (%d failures in a row)", backend.name, backend.breaker.failures)
        elif after is not before and after is Health.UP:
            log.info("backend %s is up", backend.name)

    def report(
        self, name: str, ok: bool, overloaded: bool = False, ttft_s: float | None = None,
        tpot_s: float | None = None,
    ) -> None:
        """A passive signal from a real request: its outcome and its timings."""
        backend = self.backends.get(name)
        if backend is None:
            return
        if overloaded:
            backend.limiter.on_overload()
            return  # a busy backend is not a broken one
        if not ok:
            backend.errors_total += 1
        if ok and (ttft_s is not None or tpot_s is not None):
            backend.limiter.on_success(ttft_s, tpot_s)
            if ttft_s is not None:
                backend.ttft.append(ttft_s)
            if tpot_s is not None and tpot_s > 0:
                backend.tpot.append(tpot_s)
                rate = 1.0 / tpot_s
                backend.speed = rate if backend.speed == 0 else 0.9 * backend.speed + 0.1 * rate
        before = backend.health
        self._record(backend, ok)
        if before != backend.health:
            asyncio.get_running_loop().create_task(self.publish(backend))
            self._changed()

    async def publish(self, backend: BackendState) -> None:
        """Write this backend's limit, health and models into its pool's Redis keys."""
        try:
            await self._dispatcher.publish_backend(backend.config.pool, backend.record())
        except RedisError as exc:
            log.warning("could not publish backend %s: %s", backend.name, exc)

    def admin_view(self) -> list[dict[str, object]]:
        return [_view(b) for b in self.backends.values()]


def _apply_profile(b: BackendState, engine: engines.Engine, source: str) -> None:
    """Run ``b`` by ``engine``'s profile; its starting limit only where none was configured."""
    b.profile, b.engine_source = engines.profile(engine), source
    b.costs.names = b.profile.costs
    start = b.profile.max_concurrency
    if start is not None and not b.config.concurrency_set:
        p = b.limiter.params
        b.limiter.params = replace(p, initial=start, ceiling=start, floor=min(p.floor, start))
        b.limiter.limit = max(b.limiter.params.floor, min(start, b.limiter.limit))


def _percentile(values: Iterable[float], q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)


def _view(b: BackendState) -> dict[str, object]:
    e = b.limiter.engine
    return {
        "name": b.name, "url": b.config.url, "pool": b.config.pool, "models": sorted(b.models),
        "state": b.health.value, "limit": b.limit, "configured_limit": b.config.max_concurrency,
        "cooling_s": round(max(0.0, b.cool_until - time.monotonic()), 3),
        "adaptive": b.limiter.params.adaptive, "limit_reason": b.limiter.last_reason,
        "floor": b.limiter.params.floor, "ceiling": b.limiter.params.ceiling,
        "in_flight": b.in_flight, "long_cap": b.reservation.long_cap(b.limit), "borrowed": b.borrowed,
        "ttft_p50_s": _percentile(b.ttft, 0.5), "ttft_p90_s": _percentile(b.ttft, 0.9),
        "tpot_p50_s": _percentile(b.tpot, 0.5), "tpot_p99_s": _percentile(b.tpot, 0.99),
        "errors_total": b.errors_total, "consecutive_failures": b.breaker.failures,
        "engine": {"running": e.running, "waiting": e.waiting, "kv_cache_usage": e.kv_usage},
        "weight": b.config.weight, "engine_priority": b.config.engine_priority,
        "engine_profile": b.profile.name, "engine_source": b.engine_source,
        "resume_cost": asdict(b.record().cost),
    }
