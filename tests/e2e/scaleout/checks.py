"""What the scale-out tests check: leases counted in Redis, peaks counted at the simulators,
and that a failed request says why."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys
from scheduler.queue.readback import backend_states
from tests.support import eventually


async def leases_held(r: Redis, prefix: str, pool: str) -> tuple[int, int]:
    """(lease records, slots counted busy) in one pool."""
    keys = PoolKeys(prefix, pool)
    leases = int(await r.hlen(keys.lease))
    busy = sum(b.busy for b in (await backend_states(r, keys)).values())
    return leases, busy


async def completion(http: httpx.AsyncClient, gateway: str, model: str, tokens: int, i: int) -> httpx.Response:
    body = {"model": model, "prompt": f"p{i}", "max_tokens": tokens, "ignore_eos": True}
    return await http.post(f"{gateway}/v1/completions", json=body)


async def peak_running(http: httpx.AsyncClient, sim: str) -> int:
    return int((await http.get(f"{sim}/sim/stats")).json()["peak_running"])


def is_clear_error(resp: httpx.Response) -> bool:
    """A failed request must say why, OpenAI-style, with a retryable status."""
    if resp.status_code not in (429, 503, 504):
        return False
    error = resp.json().get("error", {})
    return bool(error.get("message")) and bool(error.get("type"))


async def failover_mid_load(
    gateways: list[str], sim: str, model: str, store: Redis, prefix: str, pool: str, limit: int,
    failover: Callable[[], object], n: int = 32,
) -> list[httpx.Response]:
    """Load a pool past its limit, fail its master over while requests run and wait, then check:
    every request got an answer (a result or a clear error), the limit held, the pool took new
    work afterwards, and no slot leaked (no lease left once all is done)."""
    async with httpx.AsyncClient(timeout=90) as http:
        tasks = [asyncio.create_task(completion(http, gateways[i % len(gateways)], model, 150, i)) for i in range(n)]

        async def loaded() -> bool:
            leases, _ = await leases_held(store, prefix, pool)
            return leases == limit and int(await store.zcard(PoolKeys(prefix, pool).queue)) >= limit

        await eventually(loaded, within_s=30)
        await asyncio.to_thread(failover)
        answers = await asyncio.gather(*tasks)
        after = await completion(http, gateways[0], model, 5, n)
        peak = await peak_running(http, sim)
    unclear = [(r.status_code, r.text[:200]) for r in answers if r.status_code != 200 and not is_clear_error(r)]
    assert not unclear, unclear
    assert after.status_code == 200, after.text
    assert peak <= limit
    await eventually(lambda: _no_leases(store, prefix, pool), within_s=30)
    return answers


async def _no_leases(store: Redis, prefix: str, pool: str) -> bool:
    return await leases_held(store, prefix, pool) == (0, 0)
