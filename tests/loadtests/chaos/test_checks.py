"""What a chaos run checks after each phase: tickets and leases left in the pool's keys
(written here by the scheduler's own scripts), sequences left on the simulator, and a
normal request through a replica configured as the chaos stack configures it."""

from __future__ import annotations

import dataclasses

from redis.asyncio import Redis

from loadtests.chaos.checks import Leftovers, Target, leftovers, normal_request, settle
from loadtests.chaos.stack import KEY, MAX_BODY_BYTES, MODEL, replica_config
from scheduler.queue.keys import PoolKeys
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, MessageKind, Ticket

OWNER = "test"


def _ticket(tid: str) -> Ticket:
    return Ticket(tid, MODEL, "t", "short", 10, 0.0, "interactive", 0.0)


def test_the_target_url_and_what_counts_as_clean() -> None:
    target = Target("127.0.0.1", 8123, "redis://x", "p", "http://sim", "k")
    assert target.url == "http://127.0.0.1:8123"
    assert (target.model, target.pool) == ("sim-model", "default")
    assert Leftovers(0, 0, 0).clean
    assert not Leftovers(1, 0, 0).clean and not Leftovers(0, 1, 0).clean and not Leftovers(0, 0, 1).clean


def test_the_replica_config_asks_for_the_key_limits_and_deadlines_of_a_chaos_run() -> None:
    config = replica_config("redis://r", "pfx", "http://sim", 3, 8100)
    assert config["port"] == 8100 and config["key_prefix"] == "pfx"
    assert config["backends"] == [{"name": "sim", "url": "http://sim", "models": [MODEL], "max_concurrency": 3,
                                   "adaptive": False}]
    assert config["max_body_bytes"] == MAX_BODY_BYTES
    assert KEY not in str(config)  # only the key's hash is written to the config file


async def test_leftovers_counts_queued_tickets_and_leases_until_they_are_released(
    redis: Redis, chaos_sim: str, prefix: str, redis_url: str
) -> None:
    target = Target("127.0.0.1", 1, redis_url, prefix, chaos_sim, KEY)  # the server the scripts write to
    keys = PoolKeys(prefix, target.pool)
    scripts = Scripts(redis, Timing(lease_ttl_s=60, owner_ttl_s=60, max_scan=16))
    assert await leftovers(target) == Leftovers(0, 0, 0)

    await scripts.set_backend(keys, OWNER, BackendRecord("sim", 1, models=(MODEL,)))
    granted = await scripts.enqueue(keys, OWNER, _ticket("a"), 0, 0)
    assert [m.kind for m in granted.messages] == [MessageKind.GRANT]
    holding = await leftovers(target)
    assert holding.queued == 0 and holding.leases > 0 and not holding.clean

    await scripts.enqueue(keys, OWNER, _ticket("b"), 0, 0)  # the only slot is held: b waits
    waiting = await leftovers(target)
    assert waiting.queued > 0 and waiting.leases == holding.leases

    found, _ = await settle(target, within_s=0)  # the bound passed: the last reading, not clean
    assert found == waiting

    await scripts.release(keys, OWNER, "a")  # b is granted the slot a leaves
    assert (await leftovers(target)).queued == 0
    await scripts.release(keys, OWNER, "b")
    found, _ = await settle(target)
    assert found == Leftovers(0, 0, 0)


async def test_a_normal_request_through_a_replica_is_served_and_a_wrong_key_is_refused(replica: Target) -> None:
    assert await normal_request(replica) == 200
    assert await normal_request(dataclasses.replace(replica, key="sk-wrong")) == 401
    found, _ = await settle(replica)
    assert found.clean, found
