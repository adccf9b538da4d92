"""A soak: steady load on every replica for a while, their RSS and open fds sampled."""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass, field

import httpx

from loadtests.chaos.checks import Target

KEEPALIVE_S = 1.0
MAX_IN_FLIGHT = 100  # httpx's pool gets slow (quadratic) with thousands of waiting requests
# prompts are drawn from a fixed vocabulary (Zipf-like use of 5,000 made-up words), as
# real traffic reuses words: the predictor's hashed weights warm up and level off
VOCABULARY = [f"w{i}" for i in range(5000)]


@dataclass(slots=True)
class Sample:
    t_s: float
    rss_mb: float
    fds: int


@dataclass(slots=True)
class SoakResult:
    duration_s: float
    rate: float
    sent: int = 0
    sent_s: float = 0.0  # how long sending (and finishing) took: above duration_s, the load fell behind
    ok: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    samples: dict[int, list[Sample]] = field(default_factory=dict)  # pid -> samples

    def growth(self, warmup_share: float = 0.2) -> dict[int, dict[str, float]]:
        """Per replica: RSS after warm-up, at the end, growth, peak; fds at both ends."""
        out = {}
        for pid, samples in self.samples.items():
            start = next((s for s in samples if s.t_s >= self.duration_s * warmup_share), samples[0])
            end = samples[-1]
            out[pid] = {"rss_start_mb": start.rss_mb, "rss_end_mb": end.rss_mb,
                        "growth_mb": round(end.rss_mb - start.rss_mb, 1),
                        "peak_mb": max(s.rss_mb for s in samples), "fds_start": start.fds, "fds_end": end.fds}
        return out


def sample(pid: int) -> tuple[float, int]:
    """RSS (MB) and open file descriptors of a process, from /proc."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))


async def soak(targets: list[Target], pids: list[int], duration_s: float, rate: float, seed: int = 0,
               sample_every_s: float = 2.0) -> SoakResult:
    rng = random.Random(seed)
    result = SoakResult(duration_s, rate, samples={pid: [] for pid in pids})
    loop = asyncio.get_running_loop()
    started = loop.time()
    stop = asyncio.Event()

    async def sampler() -> None:
        while True:
            for pid in pids:
                rss, fds = sample(pid)
                result.samples[pid].append(Sample(round(loop.time() - started, 1), round(rss, 1), fds))
            try:
                await asyncio.wait_for(stop.wait(), sample_every_s)
                return
            except TimeoutError:
                continue

    async def one(http: httpx.AsyncClient, i: int) -> None:
        target = targets[i % len(targets)]
        stream = rng.random() < 0.5
        words = " ".join(VOCABULARY[min(len(VOCABULARY), int(rng.paretovariate(0.8))) - 1]
                         for _ in range(rng.randint(3, 30)))
        body = {"model": target.model, "max_tokens": rng.randint(5, 120), "stream": stream,
                "messages": [{"role": "user", "content": f"Please {words}."}]}
        try:
            async with http.stream("POST", f"{target.url}/v1/chat/completions", json=body,
                                   headers={"authorization": f"Bearer {target.key}"}) as resp:
                async for _ in resp.aiter_bytes():
                    pass
            if resp.status_code == 200:
                result.ok += 1
            else:
                result.failed[str(resp.status_code)] = result.failed.get(str(resp.status_code), 0) + 1
        except httpx.HTTPError as exc:
            name = type(exc).__name__
            result.failed[name] = result.failed.get(name, 0) + 1

    sampling = asyncio.ensure_future(sampler())
    total = int(duration_s * rate)
    # idle connections are dropped by the client before the gateway's keep-alive timeout
    # can close them under a request being sent (what a proxy in front should do too)
    limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, keepalive_expiry=KEEPALIVE_S)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        tasks = []
        gate = asyncio.Semaphore(MAX_IN_FLIGHT)

        async def gated(i: int) -> None:
            try:
                await one(http, i)
            finally:
                gate.release()

        for i in range(total):
            delay = started + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)  # the open-loop schedule: one request every 1/rate s
            await gate.acquire()  # bounded: a backlog waits here, not in the client's pool
            tasks.append(asyncio.ensure_future(gated(i)))
            result.sent += 1
        await asyncio.gather(*tasks)
        result.sent_s = loop.time() - started
    stop.set()
    await sampling
    return result
