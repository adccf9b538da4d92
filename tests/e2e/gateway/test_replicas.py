"""Several gateway replicas on one Redis share one global limit and one queue."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.e2e.gateway.diagnose import all_answered
from tests.support import MODEL


async def test_two_replicas_never_exceed_max_concurrency(
    gateway_factory: Callable[..., str], redis: Redis, prefix: str
) -> None:
    with running_simulator(SimSettings(profile="fast", model=MODEL, max_num_seqs=64)) as sim:
        backends = [{"name": "sim", "url": sim, "models": [MODEL], "max_concurrency": 3}]
        a, b = gateway_factory(backends), gateway_factory(backends)
        async with httpx.AsyncClient(timeout=60) as http:

            async def one(i: int) -> int:
                url = a if i % 2 else b
                body = {"model": MODEL, "prompt": f"p{i}", "max_tokens": 100, "ignore_eos": True}
                resp = await http.post(f"{url}/v1/completions", json=body)
                assert resp.status_code == 200, resp.text
                return int(resp.json()["usage"]["completion_tokens"])

            tokens = await all_answered((one(i) for i in range(40)), redis=redis, keys=PoolKeys(prefix, "default"),
                                        gateways=(a, b), backends=(sim,))
            stats = (await http.get(f"{sim}/sim/stats")).json()
    assert tokens == [100] * 40
    assert stats["peak_running"] == 3  # the limit was reached, and never passed
