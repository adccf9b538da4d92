"""``triage bench fleet``: many gateway replicas and many backends on one Redis.

It starts one Valkey, ``--backends`` simulated backends (fast profile, slowed by
``--time-scale`` so a small machine can hold them busy; several per process, see
``simulator/fleet.py``), split evenly over ``--pools`` pools (one model per pool), and
``--replicas`` gateways. An open-loop Poisson load (seeded) goes to the replicas in turn,
slightly above what the backends can serve, so queues form. Then it reports:

* **global limits**: the most sequences each simulator ever ran at once (its own count,
  ``/sim/stats`` ``peak_running``) against the configured ``max_concurrency``;
* **priority inversions** beyond one dispatch (``fleet_watch.py`` says how they are counted);
* **Redis CPU per request** (``INFO cpu`` delta over the run, the watcher's own reads taken
  out) and commands per request (``INFO commandstats``);
* requests, errors, queue wait and end-to-end latency, and leases left once all is done.

Bounded: the load runs ``--duration`` seconds, every request has a timeout, and every child
is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from gateway.server.embedded import EmbeddedRedis, await_http_ready, free_port, stop_child
from loadtests.fleet_watch import QueueWatch, idle_rates, server_counters, server_delta
from loadtests.metrics import percentile
from loadtests.stack import Child, StackError, gateway
from scheduler.queue.keys import PoolKeys


@dataclass(frozen=True, slots=True)
class FleetConfig:
    replicas: int = 8
    backends: int = 64
    pools: int = 4
    max_concurrency: int = 1  # per backend, the global limit under test
    rps: float = 45.0  # a little above what 64 slots serve at ~1.6 s a request: queues form
    duration_s: float = 20.0
    time_scale: float = 40.0  # the fast profile, this many times slower (fewer engine steps to simulate)
    min_tokens: int = 8
    max_tokens: int = 72
    sims_per_process: int = 16
    seed: int = 1
    watch_interval_s: float = 0.02
    idle_s: float = 5.0  # Redis's background cost is measured this long before the load


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = FleetConfig()
    p.add_argument("--replicas", type=int, default=d.replicas, help=f"gateway replicas (default {d.replicas})")
    p.add_argument("--backends", type=int, default=d.backends, help=f"simulated backends (default {d.backends})")
    p.add_argument("--pools", type=int, default=d.pools, help=f"pools the backends are split into (default {d.pools})")
    p.add_argument("--max-concurrency", type=int, default=d.max_concurrency, help="limit per backend")
    p.add_argument("--rps", type=float, default=d.rps, help=f"offered requests/s (default {d.rps:g})")
    p.add_argument("--duration", type=float, default=d.duration_s, help="seconds of load")
    p.add_argument("--time-scale", type=float, default=d.time_scale, help="slow the fast profile by this factor")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.add_argument("--workdir", type=Path, default=None, help="logs and configs (default: a temporary folder)")


def config_from_args(ns: argparse.Namespace) -> FleetConfig:
    return FleetConfig(replicas=ns.replicas, backends=ns.backends, pools=ns.pools, max_concurrency=ns.max_concurrency,
                       rps=ns.rps, duration_s=ns.duration, time_scale=ns.time_scale, seed=ns.seed)


def run(ns: argparse.Namespace) -> int:
    cfg = config_from_args(ns)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    if cfg.backends < cfg.pools or cfg.pools < 1 or cfg.replicas < 1:
        print("bench fleet: need at least one replica, one pool, and a backend per pool", file=sys.stderr)
        return 2
    with ExitStack() as stack:
        workdir = ns.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="triage-fleet-")))
        result = run_fleet(cfg, workdir, stack)
    text = json.dumps(result, indent=2)
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(text + "\n", encoding="utf-8")
    print(markdown(result))
    return 0 if result["limits_held"] and result["errors"] == 0 else 1


def _log(msg: str) -> None:
    print(f"[fleet] {msg}", file=sys.stderr, flush=True)


def pool_of(backend: int, cfg: FleetConfig) -> int:
    return backend * cfg.pools // cfg.backends  # contiguous blocks, as even as the numbers allow


def run_fleet(cfg: FleetConfig, workdir: Path, stack: ExitStack) -> dict[str, Any]:
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    server = EmbeddedRedis()
    redis_url = server.start()
    stack.callback(server.stop)
    _log(f"valkey at {redis_url}; starting {cfg.backends} simulators")
    sims = start_simulators(cfg, logs, stack)
    prefix = "fleet"
    backends = [{"name": f"b{i}", "url": url, "pool": f"p{pool_of(i, cfg)}", "models": [f"m{pool_of(i, cfg)}"],
                 "max_concurrency": cfg.max_concurrency} for i, url in enumerate(sims)]
    conf = {"host": "127.0.0.1", "redis_url": redis_url, "key_prefix": prefix, "backends": backends,
            "probe_interval_s": 10.0}
    children = [gateway({**conf, "port": free_port()}, f"gateway-{i}", workdir) for i in range(cfg.replicas)]
    stack.callback(stop_all, children)
    _log(f"starting {cfg.replicas} gateways")
    with ThreadPoolExecutor(len(children)) as pool:
        urls = list(pool.map(lambda c: c.start("/ready", timeout_s=120), children))
    mirror = EmbeddedRedis()  # the watcher reads a replica: its reads cost the measured server nothing
    mirror_url = mirror.start()
    stack.callback(mirror.stop)
    return asyncio.run(_load(cfg, urls, sims, redis_url, mirror_url, prefix))


def stop_all(children: list[Child]) -> None:
    """Stop children side by side (each by its PID): one after another, their graceful
    shutdowns would add up."""
    with ThreadPoolExecutor(len(children)) as pool:
        list(pool.map(lambda c: c.stop(), children))


def start_simulators(cfg: FleetConfig, logs: Path, stack: ExitStack) -> list[str]:
    """One process per group of at most ``sims_per_process`` backends of one pool (one model);
    each binds its own free ports and writes them to a file (no race for a port)."""
    groups: list[tuple[int, int]] = []  # (pool, backends)
    for i in range(cfg.backends):
        if not groups or groups[-1][1] == cfg.sims_per_process or pool_of(i, cfg) != groups[-1][0]:
            groups.append((pool_of(i, cfg), 0))
        groups[-1] = (groups[-1][0], groups[-1][1] + 1)
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    for g, (pool, count) in enumerate(groups):
        ports_file = logs / f"simulators-{g}.ports"
        ports_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "simulator.fleet", "--count", str(count), "--ports-file", str(ports_file),
               "--host", "127.0.0.1", "--profile", "fast", "--model", f"m{pool}", "--max-num-seqs", "64",
               "--time-scale", str(cfg.time_scale), "--seed", str(cfg.seed * 1000 + g * 100)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
        with (logs / f"simulators-{g}.log").open("ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        stack.callback(stop_child, proc)
        procs.append((proc, ports_file))
    urls: list[tuple[str, subprocess.Popen[bytes]]] = []
    deadline = time.monotonic() + 120
    for g, (proc, ports_file) in enumerate(procs):
        while not ports_file.exists():  # a child starting up gives nothing to block on: poll, bounded
            if proc.poll() is not None or time.monotonic() > deadline:
                raise StackError(f"simulators {g} did not start; see {logs / f'simulators-{g}.log'}")
            time.sleep(0.1)
        urls += [(f"http://127.0.0.1:{int(p)}", proc) for p in ports_file.read_text().split()]
    for url, proc in urls:
        if not await_http_ready(proc, url + "/health", 60):
            raise StackError(f"simulator {url} did not answer /health; see {logs}")
    return [url for url, _ in urls]


async def _replica_of(mirror: Redis, redis_url: str) -> None:
    host, port = redis_url.split("//")[1].split("/")[0].split(":")
    await mirror.execute_command("REPLICAOF", host, port)
    deadline = time.monotonic() + 30
    while (await mirror.info("replication")).get("master_link_status") != "up":  # the sync: poll, bounded
        if time.monotonic() > deadline:
            raise StackError("the watcher's replica did not sync within 30 s")
        await asyncio.sleep(0.1)


async def _load(cfg: FleetConfig, gateways: list[str], sims: list[str], redis_url: str, mirror_url: str,
                prefix: str) -> dict[str, Any]:
    rng = random.Random(cfg.seed)
    redis = Redis.from_url(redis_url)
    mirror = Redis.from_url(mirror_url)
    await _replica_of(mirror, redis_url)
    pools = [f"p{j}" for j in range(cfg.pools)]
    watch = QueueWatch(mirror, prefix, pools, cfg.watch_interval_s)
    records: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=512)
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits, trust_env=False) as http:
        await _reset_peaks(http, sims)
        idle_from = await server_counters(redis)
        await asyncio.sleep(cfg.idle_s)  # a measurement window: Redis's cost with no requests
        before = await server_counters(redis)
        idle = idle_rates(idle_from, before, cfg.idle_s)
        watcher = asyncio.create_task(watch.run())
        started = time.monotonic()
        _log(f"load: {cfg.rps:g} requests/s for {cfg.duration_s:g} s over {len(gateways)} replicas")
        tasks: list[asyncio.Task[None]] = []
        t = 0.0
        i = 0
        while True:
            t += rng.expovariate(cfg.rps)
            if t >= cfg.duration_s:
                break
            delay = started + t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the open-loop schedule, not a wait on state
            pool = rng.randrange(cfg.pools)
            tokens = rng.randint(cfg.min_tokens, cfg.max_tokens)
            tasks.append(asyncio.create_task(_one(http, gateways[i % len(gateways)], f"m{pool}", tokens, i, records)))
            i += 1
        await asyncio.gather(*tasks)
        wall = time.monotonic() - started
        watch.stop()
        await watcher
        after = await server_counters(redis)
        peaks = await asyncio.gather(*(_peak(http, s) for s in sims))
    left = await _leases_left(redis, prefix, pools)
    await redis.aclose()
    await mirror.aclose()
    return _summary(cfg, records, wall, peaks, watch, server_delta(before, after, _ok(records), wall, idle), left)


async def _one(http: httpx.AsyncClient, gateway: str, model: str, tokens: int, i: int,
               records: list[dict[str, Any]]) -> None:
    body = {"model": model, "prompt": f"request {i}", "max_tokens": tokens, "ignore_eos": True}
    sent = time.monotonic()
    try:
        resp = await http.post(f"{gateway}/v1/completions", json=body)
        status, queue_ms = resp.status_code, float(resp.headers.get("x-triage-queue-ms", "nan"))
        error = None if status == 200 else resp.text[:200]
    except httpx.HTTPError as exc:
        status, queue_ms, error = 0, float("nan"), f"{type(exc).__name__}: {exc}"
    records.append({"status": status, "e2e_s": time.monotonic() - sent, "queue_ms": queue_ms, "error": error})


async def _reset_peaks(http: httpx.AsyncClient, sims: list[str]) -> None:
    # the probes' requests are not generations: nothing has run yet, so peaks start at 0
    peaks = await asyncio.gather(*(_peak(http, s) for s in sims))
    if any(peaks):
        raise RuntimeError("simulators already ran generations before the load")


async def _peak(http: httpx.AsyncClient, sim: str) -> int:
    return int((await http.get(f"{sim}/sim/stats")).json()["peak_running"])


async def _leases_left(redis: Redis, prefix: str, pools: list[str], within_s: float = 30.0) -> int:
    """Leases still recorded once every request has its answer (releases are sent off the
    response path, so they may trail it a little): polled, bounded."""
    deadline = time.monotonic() + within_s
    while True:
        left = sum([int(await redis.hlen(PoolKeys(prefix, p).lease)) for p in pools])
        if left == 0 or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.1)


def _ok(records: list[dict[str, Any]]) -> int:
    return sum(r["status"] == 200 for r in records)


def _summary(cfg: FleetConfig, records: list[dict[str, Any]], wall: float, peaks: list[int], watch: QueueWatch,
             redis_cost: dict[str, Any], leases_left: int) -> dict[str, Any]:
    ok = [r for r in records if r["status"] == 200]
    e2e = sorted(r["e2e_s"] for r in ok)
    queue = sorted(r["queue_ms"] for r in ok if r["queue_ms"] == r["queue_ms"])
    errors: dict[str, int] = {}
    for r in records:
        if r["status"] != 200:
            errors[str(r["status"])] = errors.get(str(r["status"]), 0) + 1
    inv = watch.total()
    return {
        "config": asdict(cfg),
        "requests": len(records),
        "ok": len(ok),
        "errors": len(records) - len(ok),
        "errors_by_status": errors,
        "error_samples": [r["error"] for r in records if r["error"]][:5],
        "wall_s": round(wall, 2),
        "rps": round(len(ok) / wall, 1) if wall else None,
        "e2e_p50_s": round(percentile(e2e, 50), 3) if e2e else None,
        "e2e_p99_s": round(percentile(e2e, 99), 3) if e2e else None,
        "queue_p50_ms": round(percentile(queue, 50), 1) if queue else None,
        "queue_p99_ms": round(percentile(queue, 99), 1) if queue else None,
        "max_concurrency": cfg.max_concurrency,
        "peak_per_backend_max": max(peaks),
        "backends_at_limit": sum(p == cfg.max_concurrency for p in peaks),
        "backends_over_limit": sum(p > cfg.max_concurrency for p in peaks),
        "limits_held": max(peaks) <= cfg.max_concurrency,
        "inversions": asdict(inv),
        "inversions_per_1000_grants": round(1000 * inv.inverted / inv.grants_seen, 2) if inv.grants_seen else 0.0,
        "leases_left": leases_left,
        **redis_cost,
    }


def markdown(r: dict[str, Any]) -> str:
    c = r["config"]
    inv = r["inversions"]
    rows = [
        ("replicas x backends (pools)", f"{c['replicas']} x {c['backends']} ({c['pools']})"),
        ("offered / served requests/s", f"{c['rps']:g} / {r['rps']}"),
        ("requests (errors)", f"{r['requests']} ({r['errors']})"),
        ("max concurrent per backend (limit)", f"{r['peak_per_backend_max']} ({r['max_concurrency']}); "
                                               f"{r['backends_at_limit']} of {c['backends']} reached it, "
                                               f"{r['backends_over_limit']} passed it"),
        ("priority inversions beyond one dispatch", f"{inv['inverted']} of {inv['grants_seen']} grants seen "
                                                    f"({inv['reads']} reads; most queued at once: "
                                                    f"{inv['max_queued']}; {inv['requeued']} dropped and queued again)"),
        ("queue wait p50 / p99 (ms)", f"{r['queue_p50_ms']} / {r['queue_p99_ms']}"),
        ("E2E p50 / p99 (s)", f"{r['e2e_p50_s']} / {r['e2e_p99_s']}"),
        ("Redis CPU per request (ms): all / net of background", f"{r['redis_cpu_ms_per_request']} / "
                                                                  f"{r.get('net_redis_cpu_ms_per_request')}"),
        ("Redis background (no requests): core share, commands/s",
         f"{r.get('idle', {}).get('redis_core_share')}, {r.get('idle', {}).get('commands_per_s')}"),
        ("Redis core share during the run", f"{r['redis_core_share']}"),
        ("Redis commands / scripts per request: all", f"{r['redis_commands_per_request']} / "
                                                      f"{r['redis_scripts_per_request']}"),
        ("Redis commands / scripts per request: net of background",
         f"{r.get('net_redis_commands_per_request')} / {r.get('net_redis_scripts_per_request')}"),
        ("leases left afterwards", f"{r['leases_left']}"),
    ]
    return "\n".join(["| figure | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]])
