"""What a test of gateways on loopback shows when a request was never answered: each gateway's own view,
each backend's, the pool's state in Redis (queue, tickets, leases, owners, inboxes), and where
every unfinished task of the process waits (the gateways and simulators these tests start run
in this process, each on its own thread and loop), taken while the requests still hang: a
failure then says whether a request was queued, granted, running or lost, and on what.

Below the tasks, the bytes: each loopback TCP connection to a gateway as the kernel holds it
(its send and receive queues, from ``/proc/net/tcp``), each gateway's listening socket (its
accept queue), and each connection a gateway's uvicorn holds (whether its response started,
completed, or was dropped as disconnected). An answer sitting in the client's receive queue
was sent and never read; one still in the gateway's send queue was not taken by the client's
side; one uvicorn marked disconnected was dropped before it was written; a request in the
gateway's receive queue was never read, and a connection in its accept queue never accepted."""

from __future__ import annotations

import asyncio
import gc
import sys
import traceback
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys
from tests import loop_guard
from tests.support import is_pending_task

T = TypeVar("T")


async def pool_state(redis: Redis, keys: PoolKeys) -> dict[str, Any]:
    owners = await redis.zrange(keys.owners, 0, -1, withscores=True)
    seconds, micros = await redis.time()
    return {
        "now": seconds + micros / 1e6,
        "queue": await redis.zrange(keys.queue, 0, -1, withscores=True),
        "tickets": await redis.hkeys(keys.tickets),
        "leases": await redis.hgetall(keys.lease),
        "backends": await redis.hgetall(keys.backends),
        "owners": owners,
        "inboxes": {o: await redis.lrange(keys.inbox(o.decode()), 0, -1) for o, _ in owners},
    }


async def views(urls: Iterable[str], path: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=10) as http:
        for url in urls:
            try:
                seen[url] = (await http.get(f"{url}{path}")).json()
            except httpx.HTTPError as exc:
                seen[url] = repr(exc)
    return seen


def _awaits(coro: Any) -> list[str]:
    """Where a suspended coroutine waits: its frame, then the frame of what it awaits, and on."""
    chain = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            path = frame.f_code.co_filename
            chain.append(f"{'/'.join(path.rsplit('/', 2)[-2:])}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain


def waiting_tasks() -> list[str]:
    """Where every unfinished asyncio task of this process that runs the project's code waits."""
    waits = []
    for obj in gc.get_objects():
        if is_pending_task(obj):
            chain = " > ".join(_awaits(obj.get_coro()))
            if any(f"{part}/" in chain for part in ("gateway", "request", "api", "server", "scheduler", "queue",
                                                     "simulator", "httpx", "httpcore", "e2e", "uvicorn")):
                waits.append(f"{obj.get_name()}: {chain}")  # the gateways', the simulators' and the clients'
    return sorted(waits)


TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
              7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING"}


def tcp_table(table: Path = Path("/proc/net/tcp")) -> list[dict[str, int | str]]:
    """Every IPv4 TCP socket as the kernel holds it: ports, state, bytes queued to send and
    received but not yet read, inode (Linux; empty elsewhere)."""
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:
        return []
    rows: list[dict[str, int | str]] = []
    for line in lines:
        fields = line.split()
        local, remote, state, queues = fields[1], fields[2], fields[3], fields[4]
        tx, rx = queues.split(":")
        rows.append({"local": int(local.split(":")[1], 16), "remote": int(remote.split(":")[1], 16),
                     "state": TCP_STATES.get(int(state, 16), state), "send_q": int(tx, 16), "recv_q": int(rx, 16),
                     "inode": int(fields[9])})
    return rows


def sockets(urls: Iterable[str]) -> list[str]:
    """The connections to and from these servers' ports, one line each, with how the tests'
    own event loop polls each socket it has a key for (``loop_guard``); then each server's
    listening socket with its accept queue (connections the kernel completed that the
    server has not accepted yet: what a listener's receive queue counts)."""
    ports = {urlsplit(u).port for u in urls}
    return _lines([r for r in tcp_table() if r["local"] in ports or r["remote"] in ports])


def process_sockets() -> list[str]:
    """Every TCP socket this process holds, as ``sockets`` shows them (a listener with its
    accept queue): for a test whose servers and clients are not known in advance."""
    mine = set(loop_guard.socket_descriptors().values())
    return _lines([r for r in tcp_table() if r["inode"] in mine])


def _lines(rows: list[dict[str, int | str]]) -> list[str]:
    polled = loop_guard.polled()
    return [f"{r['local']}->{r['remote']} {r['state']} send_q={r['send_q']} recv_q={r['recv_q']}"
            f" ({polled.get(int(r['inode'])) or _unpolled(r)})"
            for r in rows if r["state"] != "LISTEN"] + [
            f"{r['local']} LISTEN accept_q={r['recv_q']}" for r in rows if r["state"] == "LISTEN"]


def _unpolled(row: dict[str, int | str]) -> str:
    """A socket no test loop polls: for a client's socket with bytes waiting, who last
    stopped polling its descriptor (a server thread's sockets are its own loop's)."""
    if int(row["recv_q"]) == 0:
        return "no key in a test loop"
    return f"no key in a test loop; {loop_guard.read_history(int(row['inode']))}"


def server_connections() -> list[str]:
    """Each HTTP connection a uvicorn of this process holds, with its current request's state."""
    out = []
    for obj in gc.get_objects():
        if type(obj).__name__ not in ("HttpToolsProtocol", "H11Protocol") or not hasattr(obj, "cycle"):
            continue
        transport, cycle = getattr(obj, "transport", None), obj.cycle
        state = "idle" if cycle is None else (
            f"started={cycle.response_started} complete={cycle.response_complete} "
            f"disconnected={cycle.disconnected}")
        buffered = transport.get_write_buffer_size() if transport is not None else None
        closing = transport.is_closing() if transport is not None else None
        out.append(f"{obj.server}<-{obj.client} {state} write_buffer={buffered} closing={closing}")
    return sorted(out)


def threads() -> list[str]:
    """What every thread is doing now (a loop blocked in a call shows here, not among tasks)."""
    return ["".join(traceback.format_stack(frame, limit=8)) for frame in sys._current_frames().values()]


async def all_answered(calls: Iterable[Awaitable[T]], *, gateways: Iterable[str], backends: Iterable[str] = (),
                       redis: Redis | None = None, keys: PoolKeys | None = None, within_s: float = 50.0) -> list[T]:
    """Every call's result. Calls not done within ``within_s`` (under the clients' own read
    timeout, so that they still hang when looked at) fail the test with what every part saw
    (the pool's state in Redis where ``redis`` and ``keys`` are given)."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    _, pending = await asyncio.wait(tasks, timeout=within_s)
    if pending:
        gateways = tuple(gateways)
        pool = await pool_state(redis, keys) if redis is not None and keys is not None else None
        # the bytes first: a report cut short (an intermittent failure's summary) keeps them
        seen = {"sockets": sockets(gateways), "server_connections": server_connections(), "pool": pool,
                "gateways": await views(gateways, "/admin/stats"), "backends": await views(backends, "/sim/stats"),
                "tasks": waiting_tasks(), "threads": threads()}
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise AssertionError(f"{len(pending)} of {len(tasks)} requests unanswered after {within_s:g} s; "
                             f"what each part saw: {seen}")
    return [t.result() for t in tasks]
