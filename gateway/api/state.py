"""What a running gateway holds: built by ``app.create_app``, read by the routes."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.api.auth import Authenticator
from gateway.api.keystore import KeyStore
from gateway.request.proxy import Proxy
from gateway.server.drain import Drain
from gateway.settings import Settings
from gateway.telemetry.hub import Telemetry
from scheduler.backends.registry import BackendRegistry
from scheduler.queue.dispatcher import Dispatcher
from scheduler.quotas import Quotas


@dataclass(frozen=True, slots=True, kw_only=True)
class Gateway:
    settings: Settings
    redis: Redis
    dispatcher: Dispatcher
    registry: BackendRegistry
    auth: Authenticator
    proxy: Proxy
    telemetry: Telemetry
    drain: Drain
    keys: KeyStore
    quotas: Quotas

    async def redis_ok(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except RedisError:
            return False
