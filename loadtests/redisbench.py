"""``triage bench redis``: what one Redis core sustains of the scheduler's scripts alone.

No HTTP and no gateway: a client calls the scripts as a replica does, scheduled request
after scheduled request (an ``enqueue.lua`` that grants the ticket at once, then its
``release.lua``), from ``--concurrency`` tasks, for ``--seconds`` per row. Each row is one
pool: 1, 8 or 64 backends serving the model, and 0, 100 or 10,000 tickets already
queued that cannot be granted (long work, its backends' long cap at 0, behind the
measured tickets in queue order: the case the reservation of slots for short work
makes common). Every backend has a slot free for every task, so each measured request
is uncontended.

Per row, from the server's own counters, before and after:

- ``scheduled_per_s``: scheduled requests per second of Redis CPU (``INFO cpu``:
  ``used_cpu_user`` + ``used_cpu_sys`` of the server process), i.e. what one core
  sustains when this is all it does. It does not depend on the client keeping up, which
  on a small shared machine it may not;
- ``achieved_per_s``: scheduled requests per second of wall time (client-bound here);
- ``commands_per_request``: ``INFO commandstats`` calls (the commands scripts run inside
  the server, and the two ``EVALSHA`` calls themselves) per scheduled request.

``--baseline REF`` runs the same rows with the scripts of another commit (read with
``git show``) in the same run, so the two compare side by side; the report gives the
ratios. The server is an embedded Valkey of its own (``--redis-url``: another server;
its other clients then count too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from redis.asyncio import BlockingConnectionPool, Redis

from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import GrantMessage, pack_lease
from scheduler.queue.scripts import Scripts, Timing
from scheduler.types import BackendRecord, MessageKind, Ticket

OWNER = "bench"
MODEL = "m"
BACKENDS = (1, 8, 64)
QUEUED = (0, 100, 10_000)
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Row:
    version: str  # "current" or the baseline's ref
    backends: int
    queued: int
    requests: int  # scheduled requests measured
    seconds: float  # wall time of the measurement
    scheduled_per_s: float  # per second of Redis CPU: one core's ceiling
    achieved_per_s: float  # per second of wall time
    commands_per_request: float  # INFO commandstats calls, EVALSHA included
    redis_cpu_us_per_request: float


def git_source(ref: str) -> Callable[[str], str]:
    """The Lua files of commit ``ref`` (a file it lacks reads as empty)."""

    def source(name: str) -> str:
        done = subprocess.run(
            ["git", "show", f"{ref}:scheduler/queue/lua/{name}"], capture_output=True, text=True, check=False
        )
        return done.stdout if done.returncode == 0 else ""

    if not source("enqueue.lua"):
        raise SystemExit(f"no scheduler/queue/lua/enqueue.lua at {ref!r} (run inside the repository)")
    return source


async def _server_counters(redis: Redis) -> tuple[float, int]:
    cpu = await redis.info("cpu")
    stats = await redis.info("commandstats")
    calls = sum(
        int(v.get("calls", 0)) for k, v in stats.items()
        if k.startswith("cmdstat_") and k != "cmdstat_info" and isinstance(v, dict)
    )
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), calls


def _ticket(tid: str, queued: bool = False) -> Ticket:
    if queued:  # long batch work, behind every measured ticket in queue order
        return Ticket(tid, MODEL, "batch", "long", 2000, 0.0, "batch", 30.0, tier_offset_s=HOUR, restricted=True)
    return Ticket(tid, MODEL, "interactive", "short", 20, 0.0, "interactive", 0.0)


async def _setup(scripts: Scripts, redis: Redis, keys: PoolKeys, backends: int, queued: int, slots: int) -> None:
    # queued while no slot is open (each enqueue then stops early, in every version), then opened
    for limit in (0, slots):
        for i in range(backends):
            await scripts.set_backend(keys, OWNER, BackendRecord(f"b{i}", limit, models=(MODEL,), long_cap=0))
        if limit == 0:
            for start in range(0, queued, 8):
                await asyncio.gather(*(
                    scripts.enqueue(keys, OWNER, _ticket(f"q{n}", queued=True), 0, 0)
                    for n in range(start, min(queued, start + 8))
                ))
    if await redis.zcard(keys.queue) != queued:
        raise RuntimeError("the queued tickets did not stay queued")


async def measure(
    url: str, backends: int, queued: int, seconds: float, concurrency: int, version: str = "current",
    source: Callable[[str], str] | None = None,
) -> Row:
    """One row: a fresh pool under its own prefix, measured, then deleted."""
    redis = Redis.from_pool(BlockingConnectionPool.from_url(
        url, max_connections=concurrency + 2, socket_timeout=120, timeout=120,  # a busy machine stalls
    ))
    timing = Timing(lease_ttl_s=HOUR, owner_ttl_s=HOUR, max_scan=64)
    scripts = Scripts(redis, timing) if source is None else Scripts(redis, timing, source)
    keys = PoolKeys(f"bench{uuid.uuid4().hex[:8]}", "p")
    try:
        await _setup(scripts, redis, keys, backends, queued, slots=concurrency)
        for n in range(concurrency):  # warm: scripts loaded, connections open
            await _one(scripts, keys, f"w{n}")
        done = 0
        stop_at = time.monotonic() + seconds

        async def worker(w: int) -> None:
            nonlocal done
            n = 0
            while time.monotonic() < stop_at:
                await _one(scripts, keys, f"r{w}-{n}")
                n += 1
                done += 1

        cpu0, calls0 = await _server_counters(redis)
        t0 = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        wall = time.monotonic() - t0
        cpu1, calls1 = await _server_counters(redis)
        if await redis.zcard(keys.queue) != queued:
            raise RuntimeError("the queue changed during the measurement")
        cpu = max(cpu1 - cpu0, 1e-9)
        return Row(
            version, backends, queued, done, round(wall, 3), round(done / cpu, 1), round(done / wall, 1),
            round((calls1 - calls0) / max(done, 1), 2), round(cpu / max(done, 1) * 1e6, 2),
        )
    finally:
        names = [k async for k in redis.scan_iter(match=f"{keys.prefix}:*", count=1000)]
        for start in range(0, len(names), 500):
            await redis.delete(*names[start:start + 500])
        await redis.aclose()


async def _one(scripts: Scripts, keys: PoolKeys, tid: str) -> None:
    """One scheduled request: enqueue (granted at once), then release."""
    result = await scripts.enqueue(keys, OWNER, _ticket(tid), 0, 0)
    if [m.kind for m in result.messages] != [MessageKind.GRANT]:
        raise RuntimeError(f"request {tid} was not granted at once: {result}")
    grant = result.messages[0]
    assert isinstance(grant, GrantMessage)
    await scripts.release(keys, OWNER, tid, pack_lease(grant.lease))  # the record, as a replica holds it


async def run_rows(
    url: str, backends: Sequence[int], queued: Sequence[int], seconds: float, concurrency: int,
    baseline: str | None = None, on_row: Callable[[Row], None] | None = None,
) -> list[Row]:
    versions: list[tuple[str, Callable[[str], str] | None]] = [("current", None)]
    if baseline:
        versions.insert(0, (baseline, git_source(baseline)))
    rows = []
    for b in backends:
        for q in queued:
            for version, source in versions:  # side by side, row by row
                row = await measure(url, b, q, seconds, concurrency, version, source)
                rows.append(row)
                if on_row:
                    on_row(row)
    return rows


def table(rows: Sequence[Row], baseline: str | None) -> str:
    head = "| backends | queued | version | scheduled/s per core | achieved/s | commands/request | Redis µs/request |"
    lines = [head, "|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r.backends} | {r.queued} | {r.version} | {r.scheduled_per_s:,.0f} | {r.achieved_per_s:,.0f} "
            f"| {r.commands_per_request:.1f} | {r.redis_cpu_us_per_request:.1f} |"
        )
    if baseline:
        lines += ["", "| backends | queued | scheduled/s, current ÷ baseline | commands, baseline ÷ current |",
                  "|---:|---:|---:|---:|"]
        for r in rows:
            if r.version != "current":
                continue
            base = next(x for x in rows if x.version == baseline and (x.backends, x.queued) == (r.backends, r.queued))
            lines.append(
                f"| {r.backends} | {r.queued} | {r.scheduled_per_s / base.scheduled_per_s:.2f}x "
                f"| {base.commands_per_request / r.commands_per_request:.2f}x |"
            )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``triage bench redis``."""
    parser.add_argument("--backends", type=_ints, default=list(BACKENDS), help="backends per pool (default 1,8,64)")
    parser.add_argument("--queued", type=_ints, default=list(QUEUED),
                        help="tickets queued that cannot be granted (default 0,100,10000)")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per row (default 4)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight from the client (default 8)")
    parser.add_argument("--baseline", default=None, help="also run the scripts of this git commit, side by side")
    parser.add_argument("--redis-url", default=None, help="a server to measure (default: an embedded Valkey)")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")


def run(args: argparse.Namespace) -> int:
    from gateway.server.embedded import EmbeddedRedis

    server = None if args.redis_url else EmbeddedRedis()
    url = args.redis_url or server.start()  # type: ignore[union-attr]
    try:
        rows = asyncio.run(run_rows(
            url, args.backends, args.queued, args.seconds, args.concurrency, args.baseline,
            on_row=lambda r: print(f"{r.version:>10} backends={r.backends:<3} queued={r.queued:<6} "
                                   f"{r.scheduled_per_s:>9,.0f}/s per core  {r.commands_per_request:5.1f} cmds/req",
                                   flush=True),
        ))
    finally:
        if server is not None:
            server.stop()
    print(table(rows, args.baseline))
    if args.json:
        args.json.write_text(json.dumps({
            "benchmark": "redis", "seconds": args.seconds, "concurrency": args.concurrency,
            "baseline": args.baseline, "rows": [asdict(r) for r in rows],
        }, indent=2) + "\n")
    return 0


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]
