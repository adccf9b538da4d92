"""The Redis URL forms (a contract) and the clients they give."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster

from gateway.server import redis_client
from gateway.server.redis_client import CLUSTER, SENTINEL, SINGLE, parse
from gateway.settings import ConfigError, Settings, load_settings
from tests.support import eventually


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


async def test_a_command_on_a_quick_connection_skips_redis_pys_wrapping_and_keeps_its_replies(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands after the first go the quick way (never through redis-py's
    ``execute_command``) with redis-py's reply callbacks and errors; scripts load on NOSCRIPT."""
    from redis.exceptions import ResponseError

    slow: list[object] = []
    execute = Redis.execute_command

    async def counted(self: Redis, *args: object, **options: object) -> object:
        slow.append(args[0])
        return await execute(self, *args, **options)

    monkeypatch.setattr(Redis, "execute_command", counted)
    client = redis_client.command_client(redis_url, "quick-exec")
    try:
        await client.ping()  # the first makes the connection, redis-py's way
        assert slow == ["PING"]
        assert await client.set("quick-exec", 1) is True  # reply callbacks: OK -> True
        await client.hset("quick-exec-h", mapping={"a": "1", "b": "2"})
        assert await client.hgetall("quick-exec-h") == {b"a": b"1", b"b": b"2"}
        assert await client.exists("quick-exec", "nothing") == 1
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await client.incr("quick-exec-h")
        script = client.register_script("return tonumber(ARGV[1]) + 1")
        assert await script(args=[41]) == 42
        await client.script_flush()
        assert await script(args=[1]) == 2  # NOSCRIPT: loaded again
        assert slow == ["PING"]
        assert len(client.connection_pool._available_connections) == 1
        await client.delete("quick-exec", "quick-exec-h")
    finally:
        await client.aclose()


class Relay:
    """A TCP relay on loopback in front of the Redis server that can break a connection
    after the server has answered, before the client gets the answer."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.connections = 0
        self.cut_next_reply = False
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, replies: bool) -> None:
            while data := await src.read(65536):
                if replies and self.cut_next_reply:
                    self.cut_next_reply = False
                    break
                dst.write(data)
                await dst.drain()
            writer.close()
            up_writer.close()

        await asyncio.gather(pump(reader, up_writer, False), pump(up_reader, writer, True), return_exceptions=True)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


async def test_a_quick_command_whose_connection_breaks_runs_again_on_a_fresh_one(redis_url: str) -> None:
    """The connection breaks after the server ran the command, before its reply came back:
    the command goes redis-py's way, once more, on a new connection (as redis-py's own retry
    does; every command the gateway sends is safe to run twice)."""
    from urllib.parse import urlsplit

    where = urlsplit(redis_url)
    relay = Relay(where.hostname or "127.0.0.1", where.port or 6379)
    port = await relay.start()
    client = redis_client.command_client(f"redis://127.0.0.1:{port}{where.path}", "quick-broken")
    try:
        await client.set("quick-broken", "a")
        assert relay.connections == 1
        relay.cut_next_reply = True
        assert await client.set("quick-broken", "b") is True
        assert relay.connections == 2 and await client.get("quick-broken") == b"b"
        pool = client.connection_pool
        assert len(pool._available_connections) == 1 and not pool._in_use_connections
        await client.delete("quick-broken")
    finally:
        await client.aclose()
        await relay.stop()


async def test_a_quick_command_cancelled_before_its_reply_leaves_no_reply_for_the_next(
    redis_url: str, redis: Redis
) -> None:
    """A command cancelled while its reply is pending (a BLPOP) must not hand that reply to
    the next command on the same connection."""
    client = redis_client.command_client(redis_url, "quick-cancel", max_connections=1)
    try:
        await client.ping()
        waiting = asyncio.ensure_future(client.blpop(["quick-cancel-list"], timeout=0))

        async def blocked() -> bool:
            return any(c["name"] == "quick-cancel" and c["cmd"] == "blpop" for c in await redis.client_list())

        await eventually(blocked, every_s=0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await redis.rpush("quick-cancel-list", "x")  # a reply the cancelled BLPOP could now get
        assert await client.set("quick-cancel-k", "v") is True
        assert await client.get("quick-cancel-k") == b"v"
        await redis.delete("quick-cancel-list", "quick-cancel-k")
    finally:
        await client.aclose()


async def test_a_command_handed_whole_to_the_kernel_sets_no_write_timer(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py bounds every write by ``asyncio.wait_for`` (a task and a timer each); a packed
    command the transport writes at once has nothing to wait for, and goes without."""
    timed: list[object] = []
    wait_for = asyncio.wait_for

    async def counted(awaitable: object, limit_s: float | None) -> object:
        timed.append(awaitable)
        return await wait_for(awaitable, limit_s)  # type: ignore[arg-type]

    client = redis_client.command_client(redis_url, "no-write-timer")
    try:
        await client.ping()  # connects (and its handshake) before the count starts
        monkeypatch.setattr(asyncio, "wait_for", counted)
        for i in range(20):
            assert await client.set(f"no-write-timer-{i}", i) is True
        assert await client.mget([f"no-write-timer-{i}" for i in range(20)]) == [str(i).encode() for i in range(20)]
        assert timed == []
        await client.delete(*[f"no-write-timer-{i}" for i in range(20)])
    finally:
        await client.aclose()


async def test_a_write_the_server_never_takes_still_ends_at_the_socket_timeout() -> None:
    """A server that stops reading: what the kernel cannot take stays in the transport's
    buffer, and the wait for it keeps redis-py's deadline and error, and drops the connection."""
    from redis import exceptions as redis_errors
    from redis.asyncio.connection import Connection

    reading = True
    held: list[asyncio.StreamWriter] = []

    async def stops_reading(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while reading and (data := await reader.read(65536)):
            writer.write(b"+OK\r\n" * data.count(b"*"))  # the connection's handshake: one OK a command

    server = await asyncio.start_server(stops_reading, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connection = redis_client.hiredis_packed(Connection)(host="127.0.0.1", port=port, socket_timeout=0.5, protocol=2)
    try:
        await connection.connect()
        reading = False  # what comes next is never read
        with pytest.raises(redis_errors.TimeoutError, match="writing"):
            await connection.send_packed_command(connection.pack_command("SET", "k", b"x" * (64 << 20)))
        assert not connection.is_connected
    finally:
        await connection.disconnect()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
