"""``fifo_backlog``: past a backlog, the real Lua scripts grant the queue in arrival order.

While the pool's queue holds more than ``fifo_backlog`` tickets per slot, the dispatch
walks ``P:arrivals`` (arrival plus tier offset) instead of the score order; at or below
it, short work overtakes again. Tiers keep their order; a ticket queued by a replica
without the setting (so not in ``P:arrivals``) keeps the whole queue in score order.
"""

from __future__ import annotations

import uuid

from redis.asyncio import Redis

from scheduler.policy.order import PolicyName, PolicyParams, order
from scheduler.queue.keys import PoolKeys
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Ticket
from tests.scheduler.queue.test_queue_order import ME, drain_one_at_a_time

PARAMS = PolicyParams(max_slack_s=30.0, slack_per_token_s=0.02)
LONG, SHORT = 4000, 10  # slack 30 s (the bound) and 0.2 s


def ticket(tid: str, tokens: int, tier: str = "interactive") -> Ticket:
    o = order(PolicyName.SHORT_FIRST, tokens, tier, "t", PARAMS)
    return Ticket(tid, "m", "t", "c", tokens, 0.0, tier, o.slack_s, o.tier_offset_s, o.cost_s)


def scripts(redis: Redis, fifo_backlog: float) -> Scripts:
    return Scripts(redis, Timing(30.0, 30.0, 64, max_slack_s=PARAMS.max_slack_s, fifo_backlog=fifo_backlog))


async def queue_then_grant_one_at_a_time(
    redis: Redis, arrivals: list[tuple[str, int, str]], fifo_backlog: float, queued_by: Scripts | None = None,
) -> list[str]:
    """Queue the tickets (no slot yet), then open one slot and release each grant in
    turn: the order the pool granted them in."""
    s = scripts(redis, fifo_backlog)
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    await s.set_backend(keys, ME, BackendRecord("b", 0, models=("m",)))
    for tid, tokens, tier in arrivals:
        result = await (queued_by or s).enqueue(keys, ME, ticket(tid, tokens, tier), 0, 0)
        assert result.status == 1 and not result.messages
    granted = await drain_one_at_a_time(s, keys, len(arrivals))
    assert await redis.zcard(keys.arrivals) == 0  # every granted ticket left the arrival order too
    return granted


ARRIVALS = [("t0-long", LONG, "interactive"), ("t1-long", LONG, "interactive"), ("t2-short", SHORT, "interactive"),
            ("t3-long", LONG, "interactive"), ("t4-short", SHORT, "interactive")]


async def test_short_work_overtakes_only_while_the_backlog_is_at_most_the_setting(redis: Redis) -> None:
    # one slot, fifo_backlog 2: with 5, 4 and 3 queued, the oldest goes; with 2, the shortest
    granted = await queue_then_grant_one_at_a_time(redis, ARRIVALS, fifo_backlog=2)
    assert granted == ["t0-long", "t1-long", "t2-short", "t4-short", "t3-long"]


async def test_without_the_setting_short_work_always_overtakes(redis: Redis) -> None:
    granted = await queue_then_grant_one_at_a_time(redis, ARRIVALS, fifo_backlog=0)
    assert granted == ["t2-short", "t4-short", "t0-long", "t1-long", "t3-long"]


async def test_arrival_order_keeps_the_tiers(redis: Redis) -> None:
    arrivals = [("t0-batch", SHORT, "batch"), ("t1-long", LONG, "interactive"), ("t2-short", SHORT, "interactive")]
    granted = await queue_then_grant_one_at_a_time(redis, arrivals, fifo_backlog=0.5)
    assert granted == ["t1-long", "t2-short", "t0-batch"]  # the batch ticket's 60 s offset still holds


async def test_tickets_queued_by_a_replica_without_the_setting_keep_the_score_order(redis: Redis) -> None:
    granted = await queue_then_grant_one_at_a_time(redis, ARRIVALS, fifo_backlog=2, queued_by=scripts(redis, 0))
    assert granted == ["t2-short", "t4-short", "t0-long", "t1-long", "t3-long"]


async def test_a_cancelled_ticket_leaves_the_arrival_order(redis: Redis) -> None:
    s = scripts(redis, 1)
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    await s.set_backend(keys, ME, BackendRecord("b", 0, models=("m",)))
    for tid, tokens, tier in ARRIVALS[:3]:
        await s.enqueue(keys, ME, ticket(tid, tokens, tier), 0, 0)
    assert await redis.zcard(keys.arrivals) == 3
    assert await s.cancel(keys, "t1-long")
    assert await redis.zrange(keys.arrivals, 0, -1) == [b"t0-long", b"t2-short"]
