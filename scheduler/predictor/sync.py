"""Keeps a replica's length predictor in step with the others through Redis.

Learning is local and immediate (``observe`` on every completed request); sharing is
periodic: every ``interval_s`` the replica pushes what it learned since the last push
(sums, merged with HINCRBYFLOAT) and pulls the merged state. At start it pulls, so a
restarted gateway keeps what the fleet learned; at stop it pushes what is left.
"""

from __future__ import annotations

import logging
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from scheduler import tasks

log = logging.getLogger("triage.learning")


class Shared(Protocol):
    async def push(self, redis: Redis) -> None: ...

    async def pull(self, redis: Redis) -> None: ...


class PredictorSync:
    def __init__(self, predictor: Shared, redis: Redis, interval_s: float) -> None:
        self._predictor = predictor
        self._redis = redis
        self._syncs = tasks.Periodic(interval_s, self._sync, "predictor sync", log=log)

    async def start(self) -> None:
        await self._sync(push=False)
        self._syncs.start()

    async def stop(self) -> None:
        await self._syncs.stop()
        await self._sync(pull=False)

    async def _sync(self, push: bool = True, pull: bool = True) -> None:
        try:
            if push:
                await self._predictor.push(self._redis)
            if pull:
                await self._predictor.pull(self._redis)
        except RedisError as exc:
            # what was learned stays local and goes out with the next push
            log.warning("predictor sync failed: %s", exc)
