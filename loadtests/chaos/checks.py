"""What must hold after every chaos run: nothing left queued or leased in Redis, the
backend idle, and a normal request still served."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys
from scheduler.queue.readback import backend_states


@dataclass(frozen=True, slots=True)
class Target:
    """A gateway under test and what stands behind it."""

    host: str
    port: int
    redis_url: str
    prefix: str
    sim_url: str
    key: str
    model: str = "sim-model"
    pool: str = "default"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Leftovers:
    queued: int  # tickets in the queue or the ticket table
    leases: int  # leases, or slots counted busy
    sim_running: int  # sequences the simulator still runs or holds waiting

    @property
    def clean(self) -> bool:
        return self.queued == 0 and self.leases == 0 and self.sim_running == 0


async def leftovers(target: Target) -> Leftovers:
    keys = PoolKeys(target.prefix, target.pool)
    redis = Redis.from_url(target.redis_url)
    try:
        queued = int(await redis.zcard(keys.queue)) + int(await redis.hlen(keys.tickets))
        leases = int(await redis.hlen(keys.lease))
        leases += sum(b.busy for b in (await backend_states(redis, keys)).values())
    finally:
        await redis.aclose()
    async with httpx.AsyncClient(timeout=10) as http:
        stats = (await http.get(f"{target.sim_url}/sim/stats")).json()
    return Leftovers(queued, leases, int(stats["running"]) + int(stats["waiting"]))


async def settle(target: Target, within_s: float = 30.0) -> tuple[Leftovers, float]:
    """Wait (bounded) until nothing is left; the last reading and how long it took."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        found = await leftovers(target)
        if found.clean or loop.time() - started > within_s:
            return found, loop.time() - started
        await asyncio.sleep(0.05)


async def normal_request(target: Target) -> int:
    """The status of one ordinary chat request (200 expected)."""
    body = {"model": target.model, "max_tokens": 4, "messages": [{"role": "user", "content": "still there?"}]}
    async with httpx.AsyncClient(timeout=60) as http:
        resp = await http.post(f"{target.url}/v1/chat/completions", json=body,
                               headers={"authorization": f"Bearer {target.key}"})
    return resp.status_code
