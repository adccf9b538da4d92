"""The backends a replica knows: their models, health and limits, mirrored into Redis.

Each probe round asks every backend for ``/v1/models`` (health and models at once)
and writes what it found into the pool's Redis keys through ``backend.lua``. That
write is idempotent, so it also restores the registry after Redis lost its data.

Passive signals (connect errors, 5xx, broken streams) count as failed probes: after
``fail_threshold`` failures in a row the backend is taken out; one good probe brings
it back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
from redis.exceptions import RedisError

from .dispatcher import Dispatcher

log = logging.getLogger("triage.backends")


@dataclass(frozen=True, slots=True)
class BackendConfig:
    name: str
    url: str  # base URL, without /v1
    pool: str
    max_concurrency: int
    models: tuple[str, ...] | None = None  # None: discover from /v1/models
    api_key: str | None = None


@dataclass(slots=True)
class BackendState:
    config: BackendConfig
    models: set[str] = field(default_factory=set)
    healthy: bool = False
    failures: int = 0  # consecutive
    limit: int = 0
    errors_total: int = 0

    @property
    def name(self) -> str:
        return self.config.name


class BackendRegistry:
    def __init__(
        self,
        configs: Iterable[BackendConfig],
        client: httpx.AsyncClient,
        dispatcher: Dispatcher,
        probe_interval_s: float,
        fail_threshold: int = 2,
    ) -> None:
        self._client = client
        self._dispatcher = dispatcher
        self._interval = probe_interval_s
        self._fail_threshold = fail_threshold
        self.backends: dict[str, BackendState] = {}
        for c in configs:
            self.backends[c.name] = BackendState(c, set(c.models or ()), limit=c.max_concurrency)
        self._task: asyncio.Task[None] | None = None

    @property
    def pools(self) -> set[str]:
        return {b.config.pool for b in self.backends.values()}

    def models(self) -> list[str]:
        return sorted({m for b in self.backends.values() for m in b.models})

    def pool_of(self, model: str) -> str | None:
        for b in self.backends.values():
            if model in b.models:
                return b.config.pool
        return None

    def any_healthy(self) -> bool:
        return any(b.healthy for b in self.backends.values())

    async def start(self) -> None:
        await self.probe_all()
        self._task = asyncio.create_task(self._loop(), name="backend-probe")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.probe_all()

    async def probe_all(self) -> None:
        await asyncio.gather(*(self._probe(b) for b in self.backends.values()))

    async def _probe(self, backend: BackendState) -> None:
        headers = {"authorization": f"Bearer {backend.config.api_key}"} if backend.config.api_key else {}
        try:
            resp = await self._client.get(f"{backend.config.url}/v1/models", headers=headers, timeout=5.0)
            ok = resp.status_code == 200
            if ok and backend.config.models is None:
                backend.models = {m["id"] for m in resp.json().get("data", []) if isinstance(m, dict)}
        except (httpx.HTTPError, ValueError):
            ok = False
        self._record(backend, ok)
        await self.publish(backend)

    def _record(self, backend: BackendState, ok: bool) -> None:
        if ok:
            if not backend.healthy:
                log.info("backend %s is up", backend.name)
            backend.failures, backend.healthy = 0, True
            return
        backend.failures += 1
        if backend.healthy and backend.failures >= self._fail_threshold:
            log.warning("backend %s is down after %d failures", backend.name, backend.failures)
            backend.healthy = False

    def report(self, name: str, ok: bool) -> None:
        """A passive signal from a real request."""
        backend = self.backends.get(name)
        if backend is None:
            return
        if not ok:
            backend.errors_total += 1
        was = backend.healthy
        self._record(backend, ok)
        if was != backend.healthy:
            asyncio.get_running_loop().create_task(self.publish(backend))

    async def publish(self, backend: BackendState) -> None:
        """Write this backend's limit, health and models into its pool's Redis keys."""
        try:
            await self._dispatcher.publish_backend(
                backend.config.pool, backend.name, backend.limit, not backend.healthy, sorted(backend.models)
            )
        except RedisError as exc:
            log.warning("could not publish backend %s: %s", backend.name, exc)
