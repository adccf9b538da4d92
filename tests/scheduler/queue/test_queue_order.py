"""Order guarantees of the real Lua scripts on a real Redis-protocol server.

- starvation bound (property test): no ticket is overtaken by one of its tier that
  arrived more than ``max_slack`` seconds after it;
- fairness: a tenant sending ten times the load does not crowd out another;
- shedding: a full queue sheds its least urgent ticket for a more urgent one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from scheduler.errors import Shed
from scheduler.policy.order import PolicyName, PolicyParams, order
from scheduler.queue.dispatcher import Dispatcher, QueueLimits
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import parse_ticket
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Ticket
from tests.support import eventually

ME = "owner-1"



def ticket(tid: str, tokens: int, tenant: str, params: PolicyParams, tier: str = "interactive") -> Ticket:
    o = order(PolicyName.SHORT_FIRST, tokens, tier, tenant, params)
    return Ticket(tid, "m", tenant, "c", tokens, 0.0, tier, o.slack_s, o.tier_offset_s, o.cost_s)


async def drain_one_at_a_time(scripts: Scripts, keys: PoolKeys, n: int) -> list[str]:
    """Open one slot and grant the queue one ticket at a time; the grant order."""
    granted = [m.ticket for m in await scripts.set_backend(keys, ME, BackendRecord("b", 1, models=("m",)))]
    while len(granted) < n:
        messages = await scripts.release(keys, ME, granted[-1])
        assert messages, "a queued ticket was not granted"
        granted += [m.ticket for m in messages if m.kind == "G"]
    return granted


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    arrivals=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=4000),  # predicted tokens
            st.sampled_from(["a", "b", "c"]),  # tenant
            st.sampled_from([0.0, 0.0, 0.002, 0.01]),  # gap before the next arrival, seconds
        ),
        min_size=2,
        max_size=14,
    )
)
async def test_starvation_bound(redis: Redis, arrivals: list[tuple[int, str, float]]) -> None:
    params = PolicyParams(max_slack_s=0.008, slack_per_token_s=0.00001)
    scripts = Scripts(redis, Timing(30.0, 30.0, 64, max_slack_s=params.max_slack_s))
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    await scripts.set_backend(keys, ME, BackendRecord("b", 0, models=("m",)))  # no capacity yet: everything queues
    ids = []
    for i, (tokens, tenant, gap) in enumerate(arrivals):
        tid = f"t{i:02d}"
        result = await scripts.enqueue(keys, ME, ticket(tid, tokens, tenant, params), 0, 0)
        assert result.status == 1 and not result.messages
        ids.append(tid)
        if gap:
            await asyncio.sleep(gap)
    arrival = {}
    for tid in ids:
        arrival[tid] = parse_ticket(await redis.hget(keys.tickets, tid)).arrival  # the server's clock at enqueue
    granted = await drain_one_at_a_time(scripts, keys, len(ids))
    assert sorted(granted) == ids  # every ticket granted exactly once
    for pos, earlier in enumerate(granted):
        for later in granted[pos + 1 :]:
            # `earlier` went first: it must not have arrived more than max_slack after `later`
            assert arrival[earlier] - arrival[later] <= params.max_slack_s + 1e-6


async def test_short_first_within_the_bound(redis: Redis) -> None:
    params = PolicyParams(max_slack_s=30.0, slack_per_token_s=0.02)
    scripts = Scripts(redis, Timing(30.0, 30.0, 64, max_slack_s=30.0))
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    await scripts.set_backend(keys, ME, BackendRecord("b", 0, models=("m",)))
    for tid, tokens in [("long1", 2000), ("long2", 1000), ("short1", 20), ("mid", 300), ("short2", 40)]:
        await scripts.enqueue(keys, ME, ticket(tid, tokens, "x", params), 0, 0)
    assert await drain_one_at_a_time(scripts, keys, 5) == ["short1", "short2", "mid", "long2", "long1"]


async def test_batch_tier_goes_after_interactive(redis: Redis) -> None:
    params = PolicyParams()
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    await scripts.set_backend(keys, ME, BackendRecord("b", 0, models=("m",)))
    await scripts.enqueue(keys, ME, ticket("batch-short", 5, "x", params, tier="batch"), 0, 0)
    await scripts.enqueue(keys, ME, ticket("inter-long", 1000, "x", params), 0, 0)
    assert await drain_one_at_a_time(scripts, keys, 2) == ["inter-long", "batch-short"]


async def test_flooding_tenant_does_not_crowd_out_another(any_redis_url: str, prefix: str) -> None:
    """Closed loops: tenant A keeps 20 requests outstanding, B keeps 2, one backend of 2 slots."""
    redis, listen = Redis.from_url(any_redis_url), Redis.from_url(any_redis_url)
    params = PolicyParams()
    d = Dispatcher(
        redis, listen, Scripts(redis, Timing(30.0, 30.0, 64)), prefix=prefix, owner=ME, pools=["p"],
        limits=QueueLimits(), heartbeat_s=1.0,
    )
    await d.start()
    await d.publish_backend("p", BackendRecord("b", 2, models=("m",)))
    dispatched: list[str] = []
    stop = asyncio.Event()

    async def client(tenant: str) -> None:
        while not stop.is_set():
            grant = await d.acquire(ticket(uuid.uuid4().hex, 100, tenant, params), "p")
            dispatched.append(tenant)
            if len(dispatched) >= 300:
                stop.set()
            await asyncio.sleep(0)  # "serve" it
            d.release_soon(grant)

    tasks = [asyncio.create_task(client("A")) for _ in range(20)] + [
        asyncio.create_task(client("B")) for _ in range(2)
    ]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await d.stop()
    await redis.aclose()
    await listen.aclose()
    share = Counter(dispatched[100:300])["B"] / 200  # after the start-up transient
    # arrival order would give B about 2/22 of the dispatches; equal weights give it half
    assert 0.35 <= share <= 0.65, share


async def test_full_queue_sheds_the_least_urgent(any_redis_url: str, prefix: str) -> None:
    redis, listen = Redis.from_url(any_redis_url), Redis.from_url(any_redis_url)
    params = PolicyParams()
    d = Dispatcher(
        redis, listen, Scripts(redis, Timing(30.0, 30.0, 64)), prefix=prefix, owner=ME, pools=["p"],
        limits=QueueLimits(max_queue=2), heartbeat_s=1.0,
    )
    await d.start()
    await d.publish_backend("p", BackendRecord("b", 1, models=("m",)))
    try:
        held = await d.acquire(ticket("running", 10, "x", params), "p")
        long_wait = asyncio.create_task(d.acquire(ticket("long", 3000, "x", params), "p"))
        mid_wait = asyncio.create_task(d.acquire(ticket("mid", 500, "x", params), "p"))
        await eventually(lambda: queued_in_redis(redis, prefix, 2))  # in Redis, not only here
        short_wait = asyncio.create_task(d.acquire(ticket("short", 10, "x", params), "p"))
        with pytest.raises(Shed):
            await long_wait  # the least urgent goes
        d.release_soon(held)
        first = await short_wait
        d.release_soon(first)
        d.release_soon(await mid_wait)
        assert first.ticket == "short"
    finally:
        await d.stop()
        await redis.aclose()
        await listen.aclose()


async def queued_in_redis(redis: Redis, prefix: str, n: int) -> bool:
    return int(await redis.zcard(PoolKeys(prefix, "p").queue)) == n
