"""What a running gateway holds: built by ``app.create_app``, read by the routes."""

from __future__ import annotations

from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.auth import Authenticator
from gateway.drain import Drain
from gateway.hints import HintTrust
from gateway.keystore import KeyStore
from gateway.proxy import Proxy
from gateway.settings import Settings
from gateway.telemetry.hub import Telemetry
from scheduler.backends.registry import BackendRegistry
from scheduler.queue.dispatcher import Dispatcher
from scheduler.quota import Quotas


@dataclass(slots=True)
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
    hints: HintTrust = field(default_factory=HintTrust)  # whose length hints hold

    async def redis_ok(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except RedisError:
            return False
