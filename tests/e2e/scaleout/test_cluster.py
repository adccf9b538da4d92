"""Gateways on a real Redis Cluster (three masters, three replicas): pools on different shards,
global limits and order across replicas, and a master failover under load."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
from redis.crc import key_slot

from scheduler.queue.keys import PoolKeys
from tests.e2e.gateway.test_queueing import Blocker, chat
from tests.e2e.scaleout.checks import completion, failover_mid_load, leases_held, peak_running
from tests.support import eventually
from tests.topologies import Cluster, cluster_failover


def pools_on_every_master(cluster: Cluster, prefix: str) -> list[str]:
    """One pool name per master, each pool's slot served by a different one."""
    chosen: dict[int, str] = {}
    for i in range(200):
        name = f"pool{i}"
        slot = key_slot(PoolKeys(prefix, name).queue.encode())
        chosen.setdefault(cluster.owner_of(slot), name)
        if len(chosen) == len(cluster.masters):
            return list(chosen.values())
    raise AssertionError("no pool names spread over every master")


async def test_pools_on_three_shards_keep_global_limits_across_two_replicas(
    cluster: Cluster, sims: Callable[..., str], gateways: Callable[..., str], store, prefix: str
) -> None:
    pools = pools_on_every_master(cluster, prefix)
    models = {pool: f"m-{pool}" for pool in pools}
    urls = {pool: sims(models[pool]) for pool in pools}
    backends = [{"name": f"sim-{p}", "url": urls[p], "pool": p, "models": [models[p]], "max_concurrency": 3}
                for p in pools]
    a, b = gateways(cluster.url, backends), gateways(cluster.url, backends)
    async with httpx.AsyncClient(timeout=60) as http:
        answers = await asyncio.gather(*(
            completion(http, (a, b)[i % 2], models[pools[i % 3]], 60, i) for i in range(60)
        ))
        peaks = {p: await peak_running(http, urls[p]) for p in pools}
    assert [r.status_code for r in answers] == [200] * 60, [r.text for r in answers if r.status_code != 200]
    assert [r.json()["usage"]["completion_tokens"] for r in answers] == [60] * 60
    assert peaks == {p: 3 for p in pools}  # each pool's limit reached and never passed, by two replicas
    redis = store(cluster.url)
    for pool in pools:
        await eventually(lambda p=pool: _idle(redis, prefix, p))


async def _idle(redis, prefix: str, pool: str) -> bool:
    return await leases_held(redis, prefix, pool) == (0, 0)


async def test_global_order_across_replicas(
    cluster: Cluster, sims: Callable[..., str], gateways: Callable[..., str], store, prefix: str
) -> None:
    from tests.support import MODEL

    sim = sims(MODEL, time_scale=3.0)
    backends = [{"name": "sim", "url": sim, "models": [MODEL], "max_concurrency": 1}]
    a, b = gateways(cluster.url, backends), gateways(cluster.url, backends)
    redis = store(cluster.url)
    queue = PoolKeys(prefix, "default").queue
    blocker = Blocker()
    await blocker.occupy(a)
    done: list[str] = []

    async def send(gateway: str, label: str, hint: int) -> None:
        body = {**chat(hint + 100), "ignore_eos": False}
        async with httpx.AsyncClient(timeout=60) as http:
            resp = await http.post(
                f"{gateway}/v1/chat/completions", json=body, headers={"x-triage-expected-tokens": str(hint)}
            )
        assert resp.status_code == 200
        done.append(label)

    try:
        tasks = [asyncio.create_task(send(a, f"long{i}", 1500)) for i in range(3)]
        await eventually(lambda: _queued(redis, queue, 3))
        tasks += [asyncio.create_task(send(b, f"short{i}", 10)) for i in range(3)]
        await eventually(lambda: _queued(redis, queue, 6))
    finally:
        await blocker.release()
    await asyncio.gather(*tasks)
    assert sorted(done[:3]) == ["short0", "short1", "short2"]
    assert sorted(done[3:]) == ["long0", "long1", "long2"]


async def _queued(redis, queue: str, n: int) -> bool:
    return int(await redis.zcard(queue)) == n


async def test_master_failover_mid_load(
    cluster: Cluster, sims: Callable[..., str], gateways: Callable[..., str], store, prefix: str
) -> None:
    from tests.support import MODEL

    sim = sims(MODEL, time_scale=3.0)
    backends = [{"name": "sim", "url": sim, "models": [MODEL], "max_concurrency": 4}]
    a, b = gateways(cluster.url, backends), gateways(cluster.url, backends)
    slot = key_slot(PoolKeys(prefix, "default").queue.encode())
    moved: list[tuple[int, int]] = []
    answers = await failover_mid_load(
        [a, b], sim, MODEL, store(cluster.url), prefix, "default", 4,
        lambda: moved.append(cluster_failover(cluster, slot)),
    )
    old, new = moved[0]
    assert cluster.owner_of(slot) == new != old
    # a coordinated failover loses nothing: every request, running or queued, completes
    assert [r.status_code for r in answers] == [200] * len(answers)
