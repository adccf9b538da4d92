"""Redis round trips, counted by the server: ``INFO commandstats`` before and after.

Every command a client sends is one ``calls`` increment of its ``cmdstat_<name>``
(a script run by EVALSHA counts once, not per command inside it; a pipeline counts
each command, though it costs one round trip). The delta is taken over every command
except the ``INFO`` calls this module makes itself.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import Any

import redis

_MONITOR_LINE = re.compile(r'^[\d.]+ \[\d+ ([^\]]*)\] "([^"]+)"')


def command_calls(url: str) -> Counter[str]:
    """Calls per command so far on the server at ``url``."""
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    calls: Counter[str] = Counter()
    for key, value in stats.items():
        if key.startswith("cmdstat_") and isinstance(value, dict):
            calls[key.removeprefix("cmdstat_")] = int(value.get("calls", 0))
    return calls


def delta(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    """Calls per command between two snapshots, without our own ``info``."""
    out = {name: after[name] - before.get(name, 0) for name in after if name != "info"}
    return {name: n for name, n in sorted(out.items()) if n > 0}


_STOP = "overhead-monitor-stop"


class RoundTrips:
    """Commands the clients of a Redis server send, seen through ``MONITOR``.

    ``INFO commandstats`` also counts the commands a Lua script runs inside the
    server; ``MONITOR`` marks those ``[db lua]``, so what is left is what came over a
    socket. A pipeline still shows each of its commands, so this is an upper bound on
    round trips. MONITOR slows the server, so it is used for a short sample of its own.
    Stop it with ``stop()``: a marker ``ECHO`` ends the reading thread.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._client = redis.Redis.from_url(url, socket_timeout=30)
        self._monitor: Any = None
        self._thread: threading.Thread | None = None
        self.commands: Counter[str] = Counter()
        self.lua: Counter[str] = Counter()

    def start(self) -> None:
        self._monitor = self._client.monitor()
        self._monitor.__enter__()
        self._thread = threading.Thread(target=self._read, name="redis-monitor", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        conn = self._monitor.connection
        for _ in range(50_000_000):  # bounded; ends at the marker or when the connection closes
            try:
                line = conn.read_response()
            except (redis.RedisError, OSError, ValueError):
                return
            if isinstance(line, bytes):
                line = line.decode("utf-8", errors="replace")
            match = _MONITOR_LINE.match(str(line))
            if not match:
                continue
            source, name = match.group(1), match.group(2).lower()
            if name == "echo" and _STOP in str(line):
                return
            (self.lua if source == "lua" else self.commands)[name] += 1

    def stop(self, timeout_s: float = 10.0) -> dict[str, int]:
        """Client-sent commands by name since ``start()``."""
        marker = redis.Redis.from_url(self._url, socket_timeout=5)
        try:
            marker.echo(_STOP)
        finally:
            marker.close()
        if self._thread is not None:
            self._thread.join(timeout_s)
        try:
            self._monitor.__exit__(None, None, None)
        finally:
            self._client.close()
        return dict(sorted(self.commands.items()))
