"""A scheduler as the gateway wires it, minus HTTP: a real ``Dispatcher`` on a real
Redis-protocol server, a real ``BackendRegistry`` and ``Scheduler``.

The registry asks backends how they are through a ``Probe`` (``scheduler/backends/backend.py``);
here that is :class:`ScriptedProbe`, which answers as the test says (up with its models,
not answering, serving metrics or not) instead of over HTTP. Probe rounds run when the
test calls ``registry.probe_all()`` (the registry's own loop sleeps an hour), so each
change of health happens at a step the test chose.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import pytest
from redis.asyncio import Redis

from scheduler.backends.backend import BackendConfig, MetricsNotServed, ModelList
from scheduler.backends.registry import BackendRegistry
from scheduler.job import JobRequest, SchedulerParams
from scheduler.policy.classify import Classifier
from scheduler.policy.hints import HintTrust
from scheduler.policy.order import PolicyName, PolicyParams
from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.queue import readback
from scheduler.queue.dispatcher import Dispatcher, QueueLimits
from scheduler.queue.keys import PoolKeys
from scheduler.queue.scripts import Scripts, Timing
from scheduler.quotas import Quotas
from scheduler.service import Scheduler
from scheduler.types import ClassThresholds, PredictInput, Predictor

POOL, MODEL, TENANT = "p", "m", "acme"
HOUR = 3600.0  # the registry's probe interval: its loop never probes on its own


def backend(name: str, **kw: object) -> BackendConfig:
    """A backend of the pool serving ``MODEL`` with one slot (never called: the probe answers)."""
    options: dict[str, object] = {"pool": POOL, "max_concurrency": 1, "models": (MODEL,)}
    options.update(kw)
    return BackendConfig(name, f"http://127.0.0.1:9/{name}", **options)  # type: ignore[arg-type]


@dataclass
class ScriptedProbe:
    """The registry's ``Probe``, answering as told."""

    down: set[str] = field(default_factory=set)  # backends that give no good answer
    listing: dict[str, tuple[str, ...]] = field(default_factory=dict)  # what /v1/models lists (default: config)
    owned_by: dict[str, str] = field(default_factory=dict)
    metrics_text: dict[str, str] = field(default_factory=dict)  # backends that serve /metrics
    asked: list[str] = field(default_factory=list)  # every /v1/models asked, by backend
    scraped: list[str] = field(default_factory=list)  # every /metrics asked, by backend
    server: str | None = None  # the `server` header of every answer

    async def models(self, config: BackendConfig) -> ModelList | None:
        self.asked.append(config.name)
        if config.name in self.down:
            return None
        ids = self.listing.get(config.name, config.models or ())
        owner = self.owned_by.get(config.name, "")
        return ModelList(tuple({"id": m, "owned_by": owner} for m in ids), self.server)

    async def metrics(self, config: BackendConfig) -> str | None:
        self.scraped.append(config.name)
        text = self.metrics_text.get(config.name)
        if text is None:
            raise MetricsNotServed(config.name)
        return text


@dataclass
class Stack:
    redis: Redis
    keys: PoolKeys
    dispatcher: Dispatcher
    registry: BackendRegistry
    probe: ScriptedProbe
    scheduler: Scheduler
    predictor: Predictor
    quotas: Quotas | None

    async def busy(self, name: str) -> int:
        """Leases held on a backend, as Redis counts them."""
        return await readback.busy(self.redis, self.keys, name)

    async def busy_is(self, name: str, n: int) -> bool:
        return await self.busy(name) == n

    async def queued(self) -> int:
        return int(await self.redis.zcard(self.keys.queue))

    async def queued_is(self, n: int) -> bool:
        return await self.queued() == n

    async def down_in_redis(self, name: str) -> bool:
        return (await readback.backend_states(self.redis, self.keys))[name].down


def ask(prompt: str = "Say hello.", hint: int | None = None, tenant: str = TENANT, model: str = MODEL,
        **kw: object) -> PredictInput:
    return PredictInput(model=model, tenant=tenant, prompt=prompt, prompt_chars=len(prompt), hint=hint,
                        **kw)  # type: ignore[arg-type]


def request(tier: str = "interactive", timeout_s: float = 0.0, arrived: float | None = None,
            **kw: object) -> JobRequest:
    return JobRequest(
        request_id=f"req-{uuid.uuid4().hex[:12]}", tier=tier,
        arrived=time.monotonic() if arrived is None else arrived, timeout_s=timeout_s, **kw,  # type: ignore[arg-type]
    )


@contextlib.asynccontextmanager
async def running_stack(
    url: str, prefix: str, configs: Iterable[BackendConfig], *, params: SchedulerParams | None = None,
    timing: Timing | None = None, predictor: Predictor | None = None, policy: PolicyName = PolicyName.FIFO,
    quotas: bool | dict[str, object] = False, hints: HintTrust | None = None, fail_threshold: int = 3,
    recover_successes: int = 3, aliases: dict[str, str] | None = None, probe: ScriptedProbe | None = None,
) -> AsyncIterator[Stack]:
    """Start a dispatcher, a registry (one probe round done) and a scheduler; stop them after."""
    redis, listen = Redis.from_url(url), Redis.from_url(url)
    configs = list(configs)
    scripts = Scripts(redis, timing or Timing(lease_ttl_s=30.0, owner_ttl_s=3.0, max_scan=64))
    dispatcher = Dispatcher(
        redis, listen, scripts, prefix=prefix, owner=f"r{uuid.uuid4().hex[:8]}",
        pools={c.pool for c in configs} or {POOL}, limits=QueueLimits(), heartbeat_s=0.5,
    )
    probe = probe or ScriptedProbe()  # how the backends answer the first probe round
    registry = BackendRegistry(
        configs, probe, dispatcher, HOUR, fail_threshold=fail_threshold, recover_successes=recover_successes,
        aliases=aliases,
    )
    if predictor is None:
        predictor = LengthPredictor(PredictorConfig(name=f"p{uuid.uuid4().hex[:8]}", prefix=prefix))
    classifier = Classifier(predictor, policy, PolicyParams(), ClassThresholds())
    quota_store = None
    if quotas:
        quota_store = Quotas(redis, prefix, **(quotas if isinstance(quotas, dict) else {}))  # type: ignore[arg-type]
        await quota_store.start()
    scheduler = Scheduler(
        dispatcher, registry, classifier, params or SchedulerParams(open_tier="interactive"), quota_store, hints
    )
    await dispatcher.start()
    await registry.start()
    try:
        yield Stack(redis, PoolKeys(prefix, POOL), dispatcher, registry, probe, scheduler, predictor, quota_store)
    finally:
        await registry.stop()
        await dispatcher.stop()
        if quota_store is not None:
            await quota_store.stop()
        await listen.aclose()
        await redis.aclose()


@pytest.fixture(name="make")
async def make_stack(any_redis_url: str, prefix: str) -> AsyncIterator[Callable[..., Awaitable[Stack]]]:
    """``make(*backend configs, **running_stack options)``: stacks that stop with the test."""
    async with contextlib.AsyncExitStack() as stacks:

        async def build(*configs: object, **kw: object) -> Stack:
            return await stacks.enter_async_context(
                running_stack(any_redis_url, prefix, configs or (backend("a"),), **kw)  # type: ignore[arg-type]
            )

        yield build
