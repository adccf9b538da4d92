"""``LuaScript``: a script called by its SHA, loaded again when the server has lost it
(NOSCRIPT after a restart or a failover), the keys and arguments passed in order."""

from __future__ import annotations

from redis.asyncio import Redis

from scheduler.queue.scripts import LuaScript

ECHO = "return {#KEYS, table.concat(KEYS, ','), table.concat(ARGV, ',')}"


async def test_a_script_runs_by_its_sha_and_is_loaded_again_when_the_server_lost_it(redis: Redis) -> None:
    script = LuaScript(redis, ECHO)
    assert len(script.sha) == 40
    assert await script(keys=["a", "b"], args=["x", 2]) == [2, b"a,b", b"x,2"]  # NOSCRIPT: loaded, then run
    assert (await redis.script_exists(script.sha)) == [True]
    await redis.script_flush()
    assert await script(keys=["c"], args=["y", "z"]) == [1, b"c", b"y,z"]
    assert await script() == [0, b"", b""]
