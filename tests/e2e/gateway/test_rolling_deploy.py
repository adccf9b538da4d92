"""A rolling deploy: replicas with different backend lists share one pool safely."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import httpx
from redis.asyncio import Redis

from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.e2e.gateway.diagnose import all_answered
from tests.support import MODEL, eventually


async def test_old_and_new_replicas_share_a_pool_without_errors(
    gateway_factory: Callable[..., str], redis: Redis, prefix: str
) -> None:
    """The old replica knows s1, the new one s1 and s2 (same model, one key_prefix): every
    request is served, the old replica's only by s1, and every slot is given back."""
    sim = SimSettings(profile="fast", model=MODEL, max_num_seqs=64)
    with running_simulator(sim) as s1, running_simulator(sim) as s2:
        b1 = {"name": "s1", "url": s1, "models": [MODEL], "max_concurrency": 2, "adaptive": False}
        b2 = {"name": "s2", "url": s2, "models": [MODEL], "max_concurrency": 2, "adaptive": False}
        old, new = gateway_factory([b1]), gateway_factory([b1, b2])
        async with httpx.AsyncClient(timeout=60) as http:

            async def one(i: int) -> int:
                body = {"model": MODEL, "prompt": f"p{i}", "max_tokens": 20, "ignore_eos": True}
                resp = await http.post(f"{old if i % 2 else new}/v1/completions", json=body)
                return resp.status_code

            statuses = Counter(await all_answered((one(i) for i in range(40)), redis=redis, keys=PoolKeys(prefix, "default"),
                                                  gateways=(old, new), backends=(s1, s2)))
            served = [(await http.get(f"{s}/sim/stats")).json() for s in (s1, s2)]
    assert statuses == {200: 40}, statuses
    assert served[1]["peak_running"] >= 1  # the new replica used s2 (so the old one could have been sent there)
    keys = PoolKeys(prefix, "default")
    await eventually(lambda: _released(redis, keys))


async def _released(redis: Redis, keys: PoolKeys) -> bool:
    return all(b.busy == 0 for b in (await readback.backend_states(redis, keys)).values())
