"""``create_app(settings)``: the one place the gateway's parts are wired together."""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from opentelemetry.trace import TracerProvider
from redis.asyncio import Redis
from starlette.exceptions import HTTPException
from starlette.responses import Response

from gateway.api import admin, admin_keys
from gateway.api.auth import Authenticator, quota_limits
from gateway.api.direct import TriageApp
from gateway.api.keystore import KeyStore
from gateway.api.routes import INFERENCE, router
from gateway.api.state import Gateway
from gateway.errors import GatewayError
from gateway.request.backoff import Backoff
from gateway.request.proxy import Proxy
from gateway.server import redis_client
from gateway.server.drain import Drain, InFlight
from gateway.server.reload import ConfigSource, Reloader
from gateway.settings import ConfigError, Settings
from gateway.telemetry.hub import OtelConfig, Telemetry, TelemetrySettings
from gateway.upstream.client import Upstream, make_client
from gateway.upstream.probe import HttpProbe
from gateway.upstream.refusal import Cooldown
from scheduler.backends.backend import BackendConfig
from scheduler.backends.registry import BackendRegistry
from scheduler.job import SchedulerParams
from scheduler.policy.classify import Classifier
from scheduler.policy.limits import LimitParams
from scheduler.policy.order import PolicyParams
from scheduler.policy.quota import QuotaLimits
from scheduler.policy.reservation import ReservationParams
from scheduler.predictor.factory import Built, PredictorSpec, PredictorUnavailable, build, warm_start_file
from scheduler.predictor.sync import PredictorSync
from scheduler.queue.dispatcher import Dispatcher, QueueLimits
from scheduler.queue.scripts import Scripts, Timing
from scheduler.quotas import Quotas
from scheduler.service import Scheduler
from scheduler.types import ClassThresholds, ResumeMode


def backend_configs(settings: Settings) -> list[BackendConfig]:
    return [
        BackendConfig(
            name=b.name, url=b.url, pool=b.pool, max_concurrency=b.max_concurrency,
            models=tuple(b.models) if b.models is not None else None, api_key=b.api_key,
            weight=b.weight, engine_priority=b.engine_priority, resume=ResumeMode(b.resume),
            engine=b.engine, concurrency_set="max_concurrency" in b.model_fields_set,
            priority_order=b.engine_priority_order,
            limit=LimitParams(
                initial=b.max_concurrency, floor=b.min_concurrency, ceiling=b.max_concurrency,
                adaptive=b.adaptive, ttft_target_s=settings.ttft_target_s, tpot_target_s=settings.tpot_target_s,
                latency_always=settings.latency_always,
            ),
        )
        for b in settings.backends
    ]


def reservation_params(settings: Settings) -> ReservationParams:
    return ReservationParams(
        enabled=settings.reserve_slots, min_long_share=settings.long_share_min,
        max_long_share=settings.long_share_max, headroom_slots=settings.reserve_headroom_slots,
        long_target_utilization=settings.long_target_utilization,
        borrow_share=settings.borrow_share, quiet_after_s=settings.quiet_after_s,
    )


def policy_params(settings: Settings) -> PolicyParams:
    return PolicyParams(
        max_slack_s=settings.max_slack_s,
        slack_per_token_s=settings.slack_per_token_s,
        tier_offsets_s={
            tier: 0.0 if i == 0 else settings.batch_tier_offset_s * i for i, tier in enumerate(settings.tiers)
        },
        tenant_weights=dict(settings.tenant_weights),
        lane_max_tokens=float(settings.short_max_tokens) if settings.short_lane else None,
    )


def cooldown(settings: Settings) -> Cooldown:
    return Cooldown(settings.overload_cooldown_s, settings.overload_cooldown_max_s)


def quota_config(settings: Settings) -> tuple[QuotaLimits, dict[str, QuotaLimits]]:
    """The default tenant quota, and each named tenant's."""
    tenants = {t: quota_limits(q) or QuotaLimits() for t, q in settings.tenant_quotas.items()}
    return quota_limits(settings.default_quota) or QuotaLimits(), tenants


def make_predictor(settings: Settings) -> Built:
    """The configured predictor; ``ConfigError`` if it cannot be built."""
    spec = PredictorSpec(
        name=settings.predictor, shared_name=settings.predictor_name, prefix=settings.key_prefix,
        prior_tokens=settings.prior_tokens, weights=settings.predictor_weights,
        warm_start=warm_start_file(settings.predictor_warm_start),
    )
    try:
        return build(spec)
    except PredictorUnavailable as exc:
        raise ConfigError(str(exc)) from None


def shared_redis(url: str, name: str, max_connections: int = 64) -> Redis:
    """The gateway's client for queue operations; ``name`` shows in Redis's CLIENT LIST.

    One server, a cluster or a Sentinel-watched master, as ``url`` says
    (``gateway/server/redis_client.py``): a stale connection is retried on a fresh one (every
    script is safe to retry), and a burst waits for a free connection instead of failing."""
    return redis_client.command_client(url, name, max_connections)


def timing(settings: Settings) -> Timing:
    return Timing(
        settings.lease_ttl_s, owner_ttl_s=3 * settings.heartbeat_s, max_scan=64,
        max_slack_s=settings.max_slack_s, preempt=settings.preempt, quantum_tokens=settings.quantum_tokens,
        max_pauses=settings.max_pauses, preempt_after_s=settings.preempt_after_ms / 1000,
        pause_ratio=settings.pause_ratio, pause_backlog=settings.pause_backlog, pause_budget=settings.pause_budget,
        pause_window_s=settings.pause_window_s, fifo_backlog=settings.fifo_backlog,
    )


def scheduler_params(settings: Settings) -> SchedulerParams:
    return SchedulerParams(
        open_tier=settings.tiers[0], preempt=settings.preempt, quantum_tokens=settings.quantum_tokens,
        no_backend_grace_s=settings.no_backend_grace_s, overload_max_attempts=settings.overload_max_attempts,
    )


def classifier(settings: Settings, predictor: Built) -> Classifier:
    thresholds = ClassThresholds(settings.short_max_tokens, settings.medium_max_tokens)
    return Classifier(predictor.predictor, settings.policy, policy_params(settings), thresholds)


def telemetry_settings(settings: Settings, owner: str) -> TelemetrySettings:
    return TelemetrySettings(
        key_prefix=settings.key_prefix, policy=settings.policy.value, instance_id=owner,
        capture_content=settings.trace_content, request_log=settings.request_log,
        stats_publish_s=settings.stats_publish_s, depth_refresh_s=settings.probe_interval_s,
    )


class Part(Protocol):
    """A part of the gateway with a life of its own: background loops, a first read."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def start_all(stack: AsyncExitStack, *parts: Part | None) -> None:
    """Start the parts in order, each to be stopped when ``stack`` closes (in reverse order):
    should one fail to start, those started before it are stopped."""
    for part in parts:
        if part is not None:
            await part.start()
            stack.push_async_callback(part.stop)


async def start_gateway(
    stack: AsyncExitStack, settings: Settings, predictor: Built, drain: Drain, *,
    otel: OtelConfig, tracer_provider: TracerProvider | None,
) -> Gateway:
    """Connect, build every part and start them; ``stack`` stops and closes them all."""
    assert settings.redis_url is not None  # create_app checked
    owner = f"r{uuid.uuid4().hex[:12]}"
    redis = shared_redis(settings.redis_url, f"triage-{owner}")
    stack.push_async_callback(redis.aclose)
    listen = redis_client.listener_client(settings.redis_url, f"triage-{owner}-inbox")  # its own, for BLPOP
    stack.push_async_callback(listen.aclose)
    client = make_client(settings.upstream_timeout_s)
    stack.push_async_callback(client.aclose)

    configs = backend_configs(settings)
    scripts = Scripts(redis, timing(settings))
    dispatcher = Dispatcher(
        redis, listen, scripts, prefix=settings.key_prefix, owner=owner, pools={c.pool for c in configs},
        limits=QueueLimits(settings.max_queue, settings.max_tenant_queue), heartbeat_s=settings.heartbeat_s,
    )
    registry = BackendRegistry(
        configs, HttpProbe(client), dispatcher, probe_interval_s=settings.probe_interval_s,
        reservation=reservation_params(settings), aliases=settings.aliases,
    )
    telemetry = Telemetry(
        telemetry_settings(settings, dispatcher.owner), registry, redis,
        otel=otel, tracer_provider=tracer_provider,
    )
    keystore = KeyStore(redis, settings.key_prefix, sync_s=settings.key_sync_s)
    defaults, tenants = quota_config(settings)
    quotas = Quotas(
        redis, settings.key_prefix, defaults=defaults, tenants=tenants,
        hold_s=settings.lease_ttl_s, renew_s=settings.heartbeat_s,
    )
    scheduler = Scheduler(
        dispatcher, registry, classifier(settings, predictor), scheduler_params(settings), quotas
    )
    gateway = Gateway(
        settings=settings, redis=redis, dispatcher=dispatcher, registry=registry,
        auth=Authenticator(settings, keystore),
        proxy=Proxy(scheduler, Upstream(client), Backoff(cooldown(settings))),
        telemetry=telemetry, drain=drain, keys=keystore, quotas=quotas,
    )
    shared = predictor.shared
    sync = PredictorSync(shared, redis, interval_s=settings.predictor_sync_s) if shared is not None else None
    drain.bind(dispatcher.hand_back)
    await start_all(stack, keystore, quotas, dispatcher, registry, telemetry, sync)
    return gateway


def reload_apply(settings: Settings, gateway: Gateway) -> Callable[[Settings], Awaitable[list[str]]]:
    """What a reload changes: the config file's keys, the quotas, the backends."""
    applied = {"keys": settings.api_keys, "quotas": (settings.default_quota, settings.tenant_quotas)}
    registry, quotas = gateway.registry, gateway.quotas

    async def apply(new: Settings) -> list[str]:
        changes = []
        if new.api_keys != applied["keys"]:
            gateway.auth.reload(new)
            applied["keys"] = new.api_keys
            changes.append(f"{len(new.api_keys)} keys in the config file")
        if (new.default_quota, new.tenant_quotas) != applied["quotas"]:
            quotas.defaults, quotas.tenants = quota_config(new)
            applied["quotas"] = (new.default_quota, new.tenant_quotas)
            changes.append("quotas")
        if new.aliases != registry.aliases:
            registry.aliases = dict(new.aliases)
            changes.append("aliases")
        changes += await registry.reconcile(backend_configs(new))
        for pool in registry.reservations:  # a new pool's depth, in /metrics and /admin/stats
            gateway.telemetry.depth.add_pool(pool)
        return changes

    return apply


def create_app(
    settings: Settings, *, tracer_provider: TracerProvider | None = None, otel: OtelConfig | None = None,
    source: ConfigSource | None = None, freeze_after_start: bool = False,
) -> FastAPI:
    """``tracer_provider``: where spans go (tests pass one with an in-memory exporter);
    ``otel``: the exporters, by default from the standard ``OTEL_*`` environment;
    ``source``: where the settings came from, to reload them on SIGHUP or a file change
    (``reload.py``); None: no reload. ``freeze_after_start``: a served process's (``serve.py``),
    whose startup objects live as long as it does; not for a process that builds many apps
    (tests), whose frozen objects would never be collected."""
    if not settings.redis_url:
        raise ValueError("create_app needs a redis_url (the command line starts the embedded one)")
    otel = otel if otel is not None else OtelConfig.from_env(os.environ)
    predictor = make_predictor(settings)  # here, not at startup: a bad weights file is a config error
    drain = Drain(settings.drain_timeout_s)  # before the lifespan: a signal may come at any time

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            gateway = await start_gateway(
                stack, settings, predictor, drain, otel=otel, tracer_provider=tracer_provider
            )
            app.state.gateway = gateway
            app.state.reloader = reloader = (
                Reloader(source, settings.reload_check_s, reload_apply(settings, gateway), settings)
                if source is not None else None
            )
            await start_all(stack, reloader)
            if freeze_after_start:
                # What startup built (modules, settings, the predictor's state, the parts)
                # lives as long as the process: moved out of the collector's sight, no
                # collection walks it again. Objects made later are collected as before.
                gc.freeze()
            yield

    app = TriageApp(title="Triage", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(router)
    for path, handler in INFERENCE.items():
        app.direct(path, handler)
    app.include_router(admin.router)
    app.include_router(admin_keys.router)
    app.state.drain = drain
    app.add_middleware(InFlight, drain=drain)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        message = "Not found." if exc.status_code == 404 else str(exc.detail)
        type_ = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return GatewayError(exc.status_code, message, type_).response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        return GatewayError(400, str(exc.errors()[0].get("msg", "invalid request"))).response()

    return app
