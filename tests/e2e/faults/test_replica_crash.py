"""Kill -9 a gateway replica mid-load: the other keeps serving, and the dead one's
backend slots come back within the lease TTL. Replicas are real subprocesses."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import yaml
from redis.asyncio import Redis

from gateway.server.embedded import free_port
from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from tests.e2e.faults.conftest import MODEL, stream_tokens
from tests.support import eventually

LEASE_TTL = 3.0


class Replica:
    def __init__(self, config: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k != "TRIAGE_CONFIG"}
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "triage", "serve", "--config", str(config), "--port", str(self.port)],
            stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )

    async def ready(self) -> None:
        async def up() -> bool:
            assert self.proc.poll() is None, "replica exited"
            try:
                async with httpx.AsyncClient() as http:
                    return (await http.get(f"{self.url}/ready", timeout=1)).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(up, within_s=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()




async def busy(redis: Redis, prefix: str) -> int:
    return await readback.busy(redis, PoolKeys(prefix, "default"), "sim")


async def test_kill_9_replica_slots_come_back(tmp_path: Path, sim: str, redis_url: str, redis: Redis,
                                              prefix: str) -> None:
    config = tmp_path / "triage.yaml"
    config.write_text(yaml.safe_dump({
        "redis_url": redis_url, "key_prefix": prefix, "lease_ttl_s": LEASE_TTL, "heartbeat_s": 0.5,
        "probe_interval_s": 0.5,
        "backends": [{"name": "sim", "url": sim, "models": [MODEL], "max_concurrency": 6, "adaptive": False}],
    }))
    a, b = Replica(config, tmp_path / "a.log"), Replica(config, tmp_path / "b.log")
    try:
        await asyncio.gather(a.ready(), b.ready())
        async with httpx.AsyncClient(timeout=120) as http:
            # A holds three long streams; B runs six shorter ones, half of them queued
            doomed = [asyncio.create_task(stream_tokens(http, a.url, 20_000)) for _ in range(3)]
            await eventually(lambda: busy_at_least(redis, prefix, 3))
            # long enough (seconds) that no slot frees before the kill, even on a busy machine
            survivors = [asyncio.create_task(stream_tokens(http, b.url, 1200)) for _ in range(6)]
            await eventually(lambda: busy_at_least(redis, prefix, 6))
            doomed += [asyncio.create_task(stream_tokens(http, a.url, 5)) for _ in range(2)]
            await eventually(lambda: queued_is(redis, prefix, 5))  # B's three and A's two wait
            a.proc.kill()  # SIGKILL: no cleanup at all
            a.proc.wait()
            results = await asyncio.gather(*doomed, return_exceptions=True)
            assert all(isinstance(r, Exception) for r in results)  # their connection died with A
            # B loses nothing: every request completes with every token
            assert await asyncio.gather(*survivors) == [1200] * 6
            # A's three slots came back by lease expiry, its queued tickets were dropped
            await eventually(lambda: busy_is(redis, prefix, 0), within_s=LEASE_TTL + 5)
            assert await queued_is(redis, prefix, 0)
            assert await stream_tokens(http, b.url, 5) == 5
    finally:
        a.stop()
        b.stop()


async def busy_at_least(redis: Redis, prefix: str, n: int) -> bool:
    return await busy(redis, prefix) >= n


async def queued_is(redis: Redis, prefix: str, n: int) -> bool:
    return int(await redis.zcard(PoolKeys(prefix, "default").queue)) == n


async def busy_is(redis: Redis, prefix: str, n: int) -> bool:
    return await busy(redis, prefix) == n
