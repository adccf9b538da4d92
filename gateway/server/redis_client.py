"""A Redis URL -> the gateway's clients: one server, a Redis Cluster, or a Sentinel-watched master.

The URL forms (a contract: docs and checks rely on them)::

    redis://[user:password@]host:port[/db]          one server (``rediss://``: TLS)
    redis+cluster://[user:password@]host:port[,host:port...]
                                                    a cluster, from one or more seed nodes
                                                    (``rediss+cluster://``: TLS; db is always 0)
    redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]
                                                    the master that these sentinels name
                                                    (``rediss+sentinel://``: TLS to the data nodes)

Every client here speaks the same commands, so the rest of the gateway is written against
``redis.asyncio.Redis`` and never asks which kind it holds. What differs is below:

* **Cluster**: each pool's keys carry the hash tag ``{pool}`` (``scheduler/queue/keys.py``),
  so each script runs whole on the shard that owns the pool's slot; redis-py routes it by
  its first key and loads it there (``SCRIPT LOAD`` goes to every primary; a new primary
  after a failover answers NOSCRIPT once and gets it then). A replica's inbox for a pool is
  ``P:inbox:<owner>``, in the pool's slot too, so the script can push to it and the listener
  blocks on it (``BLPOP`` of one key) on that shard. redis-py's cluster client has no
  blocking pool: past ``max_connections`` per node it raises, so :class:`_BoundedCluster`
  lets callers wait for a free one instead, like ``BlockingConnectionPool`` does.
* **Sentinel**: ``Sentinel.master_for`` asks the sentinels for the master before each new
  connection; a connection to a demoted master fails once (``READONLY`` becomes a
  connection error) and the command is retried on the new master.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote

import redis as sync_redis
from redis import exceptions as redis_errors
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff

SINGLE, CLUSTER, SENTINEL = "single", "cluster", "sentinel"
_SCHEMES = {
    "redis": (SINGLE, False), "rediss": (SINGLE, True), "unix": (SINGLE, False),
    "redis+cluster": (CLUSTER, False), "rediss+cluster": (CLUSTER, True),
    "redis+sentinel": (SENTINEL, False), "rediss+sentinel": (SENTINEL, True),
}
_RETRY_ON = [redis_errors.ConnectionError, redis_errors.TimeoutError]


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """What a ``redis_url`` names."""

    kind: str  # SINGLE, CLUSTER or SENTINEL
    url: str  # as given (a single server's URL goes to redis-py unchanged)
    nodes: tuple[tuple[str, int], ...] = ()  # cluster seeds or sentinels
    master: str = ""  # sentinel: the master's name
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None

    def describe(self) -> str:
        """The URL without its password (for logs and error messages)."""
        nodes = ",".join(f"{h}:{p}" for h, p in self.nodes)
        if self.kind == CLUSTER:
            return f"cluster {nodes}"
        if self.kind == SENTINEL:
            return f"sentinel master '{self.master}' via {nodes}"
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}"


def parse(url: str) -> RedisTarget:
    """Read a ``redis_url``; ``ValueError`` with a message naming what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in _SCHEMES:
        raise ValueError(
            f"unsupported Redis URL scheme '{scheme}' (use redis://, rediss://, redis+cluster://, "
            "rediss+cluster:// or redis+sentinel://)"
        )
    kind, tls = _SCHEMES[scheme.lower()]
    if kind == SINGLE:
        return RedisTarget(SINGLE, url, tls=tls)
    netloc, _, path = rest.partition("/")
    path = path.partition("?")[0]
    username = password = None
    if "@" in netloc:
        auth, _, netloc = netloc.rpartition("@")
        user, colon, secret = auth.partition(":")
        username, password = (unquote(user) or None), (unquote(secret) if colon else None)
        if not colon:  # redis://password@host is redis-py's form for a password alone
            username, password = None, unquote(user)
    nodes = tuple(_node(part, url) for part in netloc.split(",") if part)
    if not nodes:
        raise ValueError(f"Redis URL {scheme}:// names no host:port")
    parts = [p for p in path.split("/") if p]
    if kind == CLUSTER:
        if parts and parts != ["0"]:
            raise ValueError("a Redis Cluster has only database 0 (redis+cluster://host:port[,host:port...])")
        return RedisTarget(CLUSTER, url, nodes, tls=tls, username=username, password=password)
    if not parts or len(parts) > 2:
        raise ValueError("a Sentinel URL names its master: redis+sentinel://host:port[,host:port...]/master-name")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit():
            raise ValueError(f"Sentinel URL: database '{parts[1]}' is not a number")
        db = int(parts[1])
    return RedisTarget(SENTINEL, url, nodes, unquote(parts[0]), db, tls, username, password)


def _node(part: str, url: str) -> tuple[str, int]:
    host, colon, port = part.rpartition(":")
    if not colon or not port.isdigit() or not host:
        raise ValueError(f"Redis URL: '{part}' is not host:port")
    return host.strip("[]"), int(port)


class _BoundedCluster(RedisCluster):
    """A cluster client whose callers wait for a connection instead of failing past the limit.

    A pipeline takes one slot for the whole pipeline."""

    def __init__(self, *args: Any, max_in_flight: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gate = asyncio.Semaphore(max_in_flight)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self._gate:
            return await super().execute_command(*args, **kwargs)


def _retry(retries: int, cap_s: float = 0.5) -> Retry:
    """The asyncio Retry (it awaits). Twice for one server (a restart); more, with a longer
    cap, for a cluster or Sentinel, whose failover takes a moment to settle."""
    return Retry(ExponentialBackoff(cap=cap_s, base=0.01), retries=retries)


try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # hiredis is a dependency; without it, redis-py packs in Python
    _hiredis_pack = None


class _HiredisPacked:
    """Commands packed by hiredis in C: the same bytes as redis-py's Python packer (which
    the asyncio client always uses), in a fifth of its time. A script call carries ~30
    arguments; anything hiredis does not take (a memoryview, a wrong type) goes the
    usual way, with redis-py's errors."""

    def pack_command(self, *args: Any) -> list[bytes]:
        enc = self.encoder  # type: ignore[attr-defined]
        if _hiredis_pack is not None and enc.encoding == "utf-8" and enc.encoding_errors == "strict":
            first = args[0]  # 'CONFIG GET' is two arguments, as redis-py splits it
            if isinstance(first, str) or (isinstance(first, bytes) and b" " in first):
                args = (*first.split(), *args[1:])
            try:
                return [_hiredis_pack(args)]
            except TypeError:
                pass
        return super().pack_command(*args)  # type: ignore[misc, no-any-return]

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        """redis-py's, without a timer where none could fire. redis-py bounds each write by
        ``socket_timeout`` with ``asyncio.wait_for``: on Python 3.11 a task, a future and a
        timer per command. A write only waits when the transport cannot take the bytes at
        once; a command handed whole to the kernel has nothing left to wait for. So a packed
        command on a healthy connection is written directly; should any of it stay in the
        transport's buffer, the wait for it goes redis-py's way (its deadline, its errors,
        the connection dropped on failure). A health check due, a closing transport, a
        reader that saw an error, or a command not yet packed: redis-py's way from the start."""
        writer = self._writer  # type: ignore[attr-defined]
        reader = self._reader  # type: ignore[attr-defined]
        if (
            type(command) is list
            and writer is not None
            and reader is not None
            and not (check_health and self._health_check_due())
            and not writer.transport.is_closing()
            and reader.exception() is None
        ):
            writer.writelines(command)
            if writer.transport.get_write_buffer_size() == 0:
                return
            command, check_health = [], False  # written: only the wait for the buffer is left
        await super().send_packed_command(command, check_health)  # type: ignore[misc]

    def _health_check_due(self) -> bool:
        """redis-py's own test in ``check_health``: would this command send a PING first?"""
        interval = self.health_check_interval  # type: ignore[attr-defined]
        return bool(interval) and asyncio.get_running_loop().time() > self.next_health_check  # type: ignore[attr-defined]


_PACKED: dict[type, type] = {}


def hiredis_packed(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    """``cls`` (a plain, TLS or Unix-socket connection) packing with hiredis."""
    if cls not in _PACKED:
        _PACKED[cls] = type(f"Packed{cls.__name__}", (_HiredisPacked, cls), {})
    return _PACKED[cls]


class _QuickPool(BlockingConnectionPool):
    """redis-py's blocking pool, with a quick way in and out for the common case.

    redis-py takes each command's connection from the pool, and gives it back, under a
    condition, a lock and a timer, with awaited calls to its own connection metrics on each
    side: about 100,000 instructions a command under uvloop, as many as sending the
    command and reading its reply. When a connection is free, no task waits for one and
    neither lock is held (the pool is not being maintained), taking it and giving it back
    are a pop and an append with no await between the test and the change, so no other
    task can come between them: done so here, the connection still checked on the way out
    (``ensure_connection``) and disconnected on the way back if redis-py marked it for
    that. Every other case goes redis-py's way. redis-py's own connection-count metrics
    do not see the connections taken quickly (the gateway does not use them)."""

    _PARTS = ("_available_connections", "_in_use_connections", "_lock", "_condition", "ensure_connection")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # another redis-py may keep its pool otherwise: then always its own way
        self._quick = all(hasattr(self, part) for part in self._PARTS) and hasattr(self._condition, "_waiters")

    def _free(self) -> bool:
        return self._quick and not self._lock.locked() and not self._condition.locked() and not self._condition._waiters

    async def take(self) -> AbstractConnection | None:
        """A free connection, checked, taken the quick way; None when there is none to take so."""
        if not (self._available_connections and self._free()):
            return None
        connection = self._available_connections.pop()
        self._in_use_connections.add(connection)
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        connection = await self.take()
        if connection is not None:
            return connection
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-any-return]

    async def release(self, connection: AbstractConnection) -> None:
        should_reconnect = getattr(connection, "should_reconnect", None)
        if self._free() and connection in self._in_use_connections and not (should_reconnect and should_reconnect()):
            self._in_use_connections.remove(connection)
            self._available_connections.append(connection)
            return
        await super().release(connection)


class _QuickRedis(Redis):
    """redis-py's client for one server, with a quick way for a command on a connection
    taken the quick way (``_QuickPool.take``).

    redis-py wraps each command in a retry object with two closures, an awaited
    initialisation, and awaited calls to its own operation metrics before and after (the
    gateway does not use them): about a third of a script call's work on the client side.
    Here the command is sent and its reply read and parsed as redis-py does
    (``send_command``, ``parse_response``: its reply callbacks, its errors). Should the
    connection fail (``ConnectionError``, ``TimeoutError``), it is closed and the command
    goes redis-py's whole way, with its retries on a fresh connection (every command the
    gateway sends is safe to run twice). Any other case goes redis-py's way from the start."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        pool = self.connection_pool
        if self.connection is not None or not isinstance(pool, _QuickPool) or _special(args[0]):
            return await super().execute_command(*args, **options)
        connection = await pool.take()
        if connection is None:
            return await super().execute_command(*args, **options)
        try:
            await connection.send_command(*args)
            return await self.parse_response(connection, args[0], **options)
        except (redis_errors.ConnectionError, redis_errors.TimeoutError):
            await connection.disconnect()
        finally:
            await pool.release(connection)
        return await super().execute_command(*args, **options)  # once more, redis-py's way


def _special(command: Any) -> bool:
    """A command redis-py sends differently from its arguments (``HIMPORT SET``: per connection)."""
    return isinstance(command, str | bytes) and command[:7].upper() in ("HIMPORT", b"HIMPORT")


def command_client(url: str, name: str, max_connections: int = 64) -> Redis:
    """The client for queue operations, probes and telemetry; ``name`` shows in CLIENT LIST.

    A connection left stale by a restart or a failover fails once and the command is retried
    on a fresh one (every script is safe to run twice). A burst waits for a free connection
    instead of failing."""
    target = parse(url)
    if target.kind == SINGLE:
        pool = _QuickPool.from_url(
            url, max_connections=max_connections, timeout=5, health_check_interval=10, retry=_retry(2, 0.2),
            client_name=name, retry_on_error=_RETRY_ON,
        )
        pool.connection_class = hiredis_packed(pool.connection_class)
        return _QuickRedis.from_pool(pool)
    if target.kind == CLUSTER:
        return cast(Redis, _BoundedCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in target.nodes], max_in_flight=max_connections,
            max_connections=max_connections, ssl=target.tls, username=target.username,
            password=target.password, client_name=name, retry=_retry(8), health_check_interval=10,
            socket_connect_timeout=3,
        ))
    return _sentinel(target).master_for(
        target.master, db=target.db, client_name=name, retry=_retry(8), retry_on_error=_RETRY_ON,
        health_check_interval=10,
    )


# A blocking read waits on the server for its own timeout (a second); the socket allows far
# longer, so a busy machine that answers late does not drop a connection whose reply (a
# grant) is on the wire: redis-py's default of 5 s did, and the grant then waited for the
# next heartbeat to be told again.
LISTEN_SOCKET_TIMEOUT_S = 30.0


def listener_client(url: str, name: str) -> Redis:
    """A client of its own for blocking reads (``BLPOP`` holds its connection while it waits)."""
    target = parse(url)
    if target.kind == SINGLE:
        return Redis.from_url(url, client_name=name, socket_timeout=LISTEN_SOCKET_TIMEOUT_S)
    if target.kind == CLUSTER:
        return cast(Redis, RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in target.nodes], ssl=target.tls,
            username=target.username, password=target.password, client_name=name, retry=_retry(8),
            socket_connect_timeout=3, socket_timeout=LISTEN_SOCKET_TIMEOUT_S,
        ))
    return _sentinel(target).master_for(target.master, db=target.db, client_name=name, retry=_retry(8),
                                        retry_on_error=_RETRY_ON, socket_timeout=LISTEN_SOCKET_TIMEOUT_S)


def _sentinel(target: RedisTarget) -> Sentinel:
    """Sentinels take no password of the data nodes (set ``sentinel_kwargs`` for that)."""
    return Sentinel(
        list(target.nodes), sentinel_kwargs={"socket_timeout": 3, "socket_connect_timeout": 3},
        ssl=target.tls, username=target.username, password=target.password, socket_connect_timeout=3,
    )


def sync_client(url: str, timeout_s: float = 5.0) -> sync_redis.Redis:
    """A blocking client (the command line's check, benchmarks' counters)."""
    target = parse(url)
    if target.kind == SINGLE:
        return sync_redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    if target.kind == CLUSTER:
        from redis.cluster import ClusterNode as SyncNode
        from redis.cluster import RedisCluster as SyncCluster

        return cast(sync_redis.Redis, SyncCluster(
            startup_nodes=[SyncNode(h, p) for h, p in target.nodes], ssl=target.tls,
            username=target.username, password=target.password,
            socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
        ))
    from redis.sentinel import Sentinel as SyncSentinel

    sentinel = SyncSentinel(
        list(target.nodes), sentinel_kwargs={"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s},
        ssl=target.tls, username=target.username, password=target.password,
        socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
    )
    return sentinel.master_for(target.master, db=target.db)


def check(url: str) -> None:
    """Ping the server, every cluster node, or the sentinels' master; raise ``RedisError`` or
    ``ValueError`` with the reason when it cannot."""
    client = sync_client(url, timeout_s=3)
    try:
        client.ping()
    finally:
        client.close()
