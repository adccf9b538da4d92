"""What a running gateway holds: built by ``app.create_app``, read by the routes."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from scheduler.backends import BackendRegistry
from scheduler.dispatcher import Dispatcher

from .auth import Authenticator
from .proxy import Proxy
from .settings import Settings
from .telemetry import Telemetry


@dataclass(slots=True)
class Gateway:
    settings: Settings
    redis: Redis
    dispatcher: Dispatcher
    registry: BackendRegistry
    auth: Authenticator
    proxy: Proxy
    telemetry: Telemetry

    async def redis_ok(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except RedisError:
            return False
