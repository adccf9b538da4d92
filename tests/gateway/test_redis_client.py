"""The Redis URL forms (a contract) and the clients they give."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster

from gateway.server import redis_client
from gateway.server.redis_client import CLUSTER, SENTINEL, SINGLE, parse
from gateway.settings import ConfigError, Settings, load_settings


@pytest.mark.parametrize(
    ("url", "kind", "nodes", "master", "db", "tls"),
    [
        ("redis://127.0.0.1:6379/5", SINGLE, (), "", 0, False),
        ("rediss://cache:6380/0", SINGLE, (), "", 0, True),
        ("redis+cluster://10.0.0.1:7000", CLUSTER, (("10.0.0.1", 7000),), "", 0, False),
        ("redis+cluster://a:7000,b:7001,c:7002/0", CLUSTER, (("a", 7000), ("b", 7001), ("c", 7002)), "", 0, False),
        ("rediss+cluster://a:7000,b:7001", CLUSTER, (("a", 7000), ("b", 7001)), "", 0, True),
        ("redis+sentinel://s1:26379,s2:26379/mymaster", SENTINEL, (("s1", 26379), ("s2", 26379)), "mymaster", 0, False),
        ("redis+sentinel://s1:26379/mymaster/3", SENTINEL, (("s1", 26379),), "mymaster", 3, False),
        ("rediss+sentinel://[::1]:26379/m", SENTINEL, (("::1", 26379),), "m", 0, True),
    ],
)
def test_url_forms(url: str, kind: str, nodes: tuple, master: str, db: int, tls: bool) -> None:
    target = parse(url)
    assert (target.kind, target.nodes, target.master, target.db, target.tls) == (kind, nodes, master, db, tls)


def test_credentials_and_a_description_without_the_password() -> None:
    target = parse("redis+cluster://app:s%3Acret@a:7000,b:7001")
    assert (target.username, target.password) == ("app", "s:cret")
    assert "cret" not in target.describe()
    assert parse("redis+sentinel://:pw@s1:26379/m").password == "pw"
    assert "pw" not in parse("redis://:pw@host:6379/0").describe()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://a:1", "unsupported Redis URL scheme"),
        ("redis+cluster://", "names no host:port"),
        ("redis+cluster://a", "not host:port"),
        ("redis+cluster://a:1/2", "only database 0"),
        ("redis+sentinel://a:1", "names its master"),
        ("redis+sentinel://a:1/m/x", "is not a number"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse(url)


def test_settings_reject_a_bad_url_at_load_time(tmp_path) -> None:
    path = tmp_path / "triage.yaml"
    path.write_text("redis_url: redis+sentinel://a:1\n")
    with pytest.raises(ConfigError, match="names its master"):
        load_settings(path)
    assert Settings(redis_url="redis+cluster://a:1,b:2").redis_url == "redis+cluster://a:1,b:2"


async def test_a_cluster_url_gives_a_cluster_client_seeded_with_every_node() -> None:
    client = redis_client.command_client("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", "t")
    assert isinstance(client, RedisCluster)
    assert {(n.host, n.port) for n in client.nodes_manager.startup_nodes.values()} == {
        ("127.0.0.1", 7000), ("127.0.0.1", 7001)
    }
    await client.aclose()


_COMMANDS = [
    ("EVALSHA", "0123abcd", 1, "q:{pool}", "me", 30, 0.25, 1e-07, 2.5e20, -5, 12345678901234567890, "héllo", b"\x00\xff"),
    ("CONFIG GET", "maxmemory"),  # two words: redis-py sends them as two arguments
    (b"CLIENT SETNAME", "x"),
    ("SET", "k", memoryview(b"ab")),  # not hiredis's: redis-py packs it
]


@pytest.mark.parametrize("command", _COMMANDS)
def test_hiredis_packs_the_bytes_redis_py_would(command: tuple) -> None:
    from redis.asyncio.connection import Connection

    plain, packed = Connection(), redis_client.hiredis_packed(Connection)()
    assert b"".join(packed.pack_command(*command)) == b"".join(plain.pack_command(*command))


@pytest.mark.parametrize("value", [True, None, [1]])
def test_a_value_redis_cannot_take_is_refused_as_redis_py_refuses_it(value: object) -> None:
    from redis.asyncio.connection import Connection
    from redis.exceptions import DataError

    with pytest.raises(DataError, match="Invalid input"):
        redis_client.hiredis_packed(Connection)().pack_command("SET", "k", value)


async def test_the_command_client_runs_scripts_and_two_word_commands_packed_by_hiredis(redis_url: str) -> None:
    client = redis_client.command_client(redis_url, "t-packed")
    try:
        assert client.connection_pool.connection_class.__name__.startswith("Packed")
        script = client.register_script("return {ARGV[1], ARGV[2], KEYS[1]}")
        assert await script(keys=["k:{p}"], args=["héllo", 0.25]) == ["héllo".encode(), b"0.25", b"k:{p}"]
        assert "maxmemory" in await client.config_get("maxmemory")
        assert any(c["name"] == "t-packed" for c in await client.client_list())
    finally:
        await client.aclose()


async def test_commands_one_after_another_take_and_give_back_connections_the_quick_way(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a connection free and nobody waiting, a command takes it and gives it back
    without redis-py's condition, lock and timer; the pool ends as it began."""
    slow = {"get": 0, "release": 0}
    get, release = BlockingConnectionPool.get_connection, BlockingConnectionPool.release

    async def counted_get(self: BlockingConnectionPool, *args: object, **kwargs: object) -> object:
        slow["get"] += 1
        return await get(self, *args, **kwargs)

    async def counted_release(self: BlockingConnectionPool, connection: object) -> None:
        slow["release"] += 1
        await release(self, connection)  # type: ignore[arg-type]

    monkeypatch.setattr(BlockingConnectionPool, "get_connection", counted_get)
    monkeypatch.setattr(BlockingConnectionPool, "release", counted_release)
    client = redis_client.command_client(redis_url, "quick-test")
    try:
        for i in range(20):
            await client.set(f"quick-{i}", i)
        assert [int(v) for v in await client.mget([f"quick-{i}" for i in range(20)])] == list(range(20))
        pool = client.connection_pool
        assert slow == {"get": 1, "release": 0}  # only the first, which had to make the connection
        assert len(pool._available_connections) == 1 and not pool._in_use_connections
        await client.delete(*[f"quick-{i}" for i in range(20)])
    finally:
        await client.aclose()


async def test_a_burst_past_the_pool_waits_its_turn_and_every_connection_comes_back(redis_url: str, redis: Redis) -> None:
    """Past ``max_connections`` callers wait redis-py's way; a connection the server closed is
    replaced on the way out; nothing is lost and the pool ends with every connection free."""
    client = redis_client.command_client(redis_url, "quick-burst", max_connections=3)
    try:
        replies = await asyncio.gather(*(client.incr("quick-burst") for _ in range(50)))
        assert sorted(replies) == list(range(1, 51))
        pool = client.connection_pool
        assert len(pool._available_connections) == 3 and not pool._in_use_connections
        for seen in await redis.client_list():  # the server closes the pool's connections
            if seen["name"] == "quick-burst":
                await redis.client_kill_filter(_id=seen["id"])
        assert await asyncio.gather(*(client.incr("quick-burst") for _ in range(6))) is not None
        assert int(await client.get("quick-burst")) == 56 and not pool._in_use_connections
        await client.delete("quick-burst")
    finally:
        await client.aclose()
