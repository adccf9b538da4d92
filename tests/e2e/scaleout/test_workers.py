"""``triage serve --workers 2``: two processes on one port, each a full replica (its own owner
id and heartbeat in Redis), both serving, one global limit between them; SIGHUP reloads
every worker's config, as it does a single process's (their drain: tests/e2e/test_drain.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import httpx
import yaml
from redis.asyncio import Redis

from gateway.server.embedded import await_http_ready, free_port, stop_child
from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import parse_lease
from tests.e2e.scaleout.checks import completion, peak_running
from tests.e2e.test_cli import child_pids
from tests.support import MODEL, eventually


async def test_two_workers_are_two_replicas_under_one_limit(
    tmp_path: Path, sims, redis_url: str, redis: Redis, prefix: str
) -> None:
    sim = sims(MODEL)
    port = free_port()
    config = tmp_path / "triage.yaml"
    config.write_text(yaml.safe_dump({
        "redis_url": redis_url, "key_prefix": prefix, "heartbeat_s": 0.5,
        "backends": [{"name": "sim", "url": sim, "models": [MODEL], "max_concurrency": 3}],
    }))
    log = (tmp_path / "serve.log").open("wb")
    proc = serve(config, port, log)
    keys = PoolKeys(prefix, "default")
    base = f"http://127.0.0.1:{port}"
    try:
        assert await asyncio.to_thread(await_http_ready, proc, f"{base}/health", 60), (tmp_path / "serve.log").read_text()
        await eventually(lambda: _owners(redis, keys, 2), within_s=30)  # both heartbeats
        workers = child_pids(proc.pid)
        owners_seen: set[str] = set()
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=0)) as http:
            for wave in range(10):  # which worker accepts a connection is the kernel's choice
                tasks = [asyncio.create_task(completion(http, base, MODEL, 40, wave * 20 + i)) for i in range(20)]
                while not all(t.done() for t in tasks):
                    owners_seen |= {parse_lease(raw).owner for raw in (await redis.hgetall(keys.lease)).values()}
                    await asyncio.sleep(0.01)  # sampling which replica holds leases, not waiting on state
                assert [t.result().status_code for t in tasks] == [200] * 20
                if len(owners_seen) == 2:
                    break
            peak = await peak_running(http, sim)
    finally:
        stop_child(proc)
        log.close()
    assert len(workers) >= 2  # the supervisor and its worker processes
    assert owners_seen == {m.decode() for m in await redis.zrange(keys.owners, 0, -1)}
    assert len(owners_seen) == 2  # both workers held leases
    assert peak == 3  # one limit for both
    assert proc.returncode is not None
    await eventually(lambda: not [p for p in workers if _alive(p)])  # the workers stopped with it


async def test_sighup_reloads_every_worker_without_restarting_it(
    tmp_path: Path, sims, redis_url: str, redis: Redis, prefix: str
) -> None:
    """The supervisor passes SIGHUP on: each worker reads the config again and registers the
    backend it adds (its own entry in ``P:reach``), in the same process as before."""
    sim = sims(MODEL)
    port = free_port()
    config = tmp_path / "triage.yaml"
    base = {"redis_url": redis_url, "key_prefix": prefix, "heartbeat_s": 0.5, "reload_check_s": 0}
    config.write_text(yaml.safe_dump({**base, "backends": [{"name": "a", "url": sim, "models": [MODEL]}]}))
    log = (tmp_path / "serve.log").open("wb")
    proc = serve(config, port, log)
    keys = PoolKeys(prefix, "default")
    try:
        assert await asyncio.to_thread(await_http_ready, proc, f"http://127.0.0.1:{port}/health", 60), (
            (tmp_path / "serve.log").read_text())
        await eventually(lambda: _owners(redis, keys, 2), within_s=30)
        owners = [m.decode() for m in await redis.zrange(keys.owners, 0, -1)]

        async def reach_is(names: set[str]) -> bool:
            return all([await readback.reach(redis, keys, owner) == names for owner in owners])

        await eventually(lambda: reach_is({"a"}), within_s=30)
        workers = set(child_pids(proc.pid))
        two = [{"name": "a", "url": sim, "models": [MODEL]}, {"name": "b", "url": sim, "models": [MODEL]}]
        config.write_text(yaml.safe_dump({**base, "backends": two}))
        proc.send_signal(signal.SIGHUP)
        await eventually(lambda: reach_is({"a", "b"}), within_s=30)
        assert set(child_pids(proc.pid)) == workers  # reloaded, not restarted
        assert {m.decode() for m in await redis.zrange(keys.owners, 0, -1)} == set(owners)
    finally:
        stop_child(proc)
        log.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def serve(config: Path, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
    argv = [sys.executable, "-m", "triage", "serve", "--config", str(config), "--port", str(port), "--workers", "2"]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


async def _owners(redis: Redis, keys: PoolKeys, n: int) -> bool:
    return int(await redis.zcard(keys.owners)) == n
