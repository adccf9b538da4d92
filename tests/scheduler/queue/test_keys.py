"""Every key a script touches is one keys.py builds, and both name each key the same way."""

from __future__ import annotations

import re
import uuid
from importlib import resources

import pytest
from redis.asyncio import Redis

from scheduler.queue.keys import FIXED, LAYOUT, NAMED, PoolKeys
from scheduler.queue.records import pack_lease, parse_lease
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, Lease, Ticket

LUA = resources.files("scheduler.queue") / "lua"


def lua(name: str) -> str:
    return (LUA / name).read_text(encoding="utf-8")


def lua_table() -> tuple[dict[str, str], dict[str, str]]:
    """``pool_keys`` in _common.lua: fixed keys (name -> suffix), named keys (name -> prefix)."""
    body = lua("_common.lua").split("local function pool_keys(base)", 1)[1].split("\nend\n", 1)[0]
    fixed = dict(re.findall(r"(\w+) = base \.\. ':([\w:]+)'", body))
    named = dict(re.findall(r"(\w+) = function\(\w+\) return base \.\. ':([\w:]+):' \.\. \w+ end", body))
    return fixed, named


def test_lua_names_each_key_as_keys_py_does() -> None:
    fixed, named = lua_table()
    assert fixed == FIXED
    assert named == {name: name for name in NAMED}


@pytest.mark.parametrize("script", [p.name for p in LUA.iterdir() if p.name.endswith(".lua")])
def test_scripts_reach_keys_only_through_the_table(script: str) -> None:
    source = lua(script)
    if script == "_common.lua":
        source = source.split("local function pool_keys(base)", 1)[1].split("\nend\n", 1)[1]
    assert "base .." not in source and "KEYS[1] .." not in source  # no key built by hand
    used = set(re.findall(r"\bK\.(\w+)", source))
    assert used <= set(FIXED) | set(NAMED)



async def test_every_key_written_is_one_keys_py_builds(redis: Redis) -> None:
    """Run every script through its paths, then read back every key under the prefix."""
    keys = PoolKeys(f"t{uuid.uuid4().hex[:8]}", "p")
    scripts = Scripts(redis, Timing(30.0, 30.0, 64))
    other = "owner-2"
    await scripts.set_backend(keys, "owner-1", BackendRecord("b", 1, models=("m",), speed=40.0, long_cap=1, borrow=1))
    await scripts.set_backend(keys, "owner-1", BackendRecord("down", 1, down=True, models=("m",)))
    await scripts.set_backend(keys, other, BackendRecord("b", 1, models=("m",), speed=40.0, long_cap=1, borrow=1))

    def ticket(tid: str, tenant: str, restricted: bool = False, timeout_s: float = 0.0) -> Ticket:
        return Ticket(tid, "m", tenant, "short", 10, timeout_s, "interactive", 0.1, cost_s=0.1, restricted=restricted)

    await scripts.enqueue(keys, "owner-1", ticket("t1", "a"), 10, 10)  # granted at once
    await scripts.enqueue(keys, other, ticket("t2", "b"), 10, 10)  # queued, then granted to the other replica
    await scripts.enqueue(keys, "owner-1", ticket("t3", "a", restricted=True), 10, 10)
    await scripts.cancel(keys, "t3")
    await scripts.heartbeat(keys, "owner-1", {"t1": pack_lease(Lease("b", "owner-1", 10, False, False))}, quiet=True)
    await scripts.release(keys, "owner-1", "t1")
    all_keys = [k.decode() async for k in redis.scan_iter(match=f"{keys.prefix}:*")]
    assert all_keys and all(keys.names(k) for k in all_keys), [k for k in all_keys if not keys.names(k)]
    # the paths ran: a grant pushed to the other replica's inbox, its lease recorded as the other's
    assert await redis.llen(keys.inbox(other)) == 1
    assert parse_lease(await redis.hget(keys.lease, "t2")).owner == other


def test_a_pool_base_names_its_layout_so_other_layouts_keep_apart() -> None:
    keys = PoolKeys("triage", "m")
    assert keys.base == f"triage:{{m}}:q{LAYOUT}" and keys.queue == f"triage:{{m}}:q{LAYOUT}:queue"
    assert keys.names(keys.lease) and not keys.names("triage:{m}:lease")  # the layout before: not ours
