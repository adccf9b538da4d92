"""A disconnect storm: many streaming clients against a few slots, each hanging up at
a random point (mid-body, queued, after the headers, mid-stream) or reading to the end."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field

import orjson

from loadtests.chaos.checks import Leftovers, Target, settle
from loadtests.chaos.rawhttp import exchange, request

WHEN = ["mid_body", "at_once", "soon", "later", "never"]


@dataclass(slots=True)
class StormResult:
    clients: int
    plans: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int | str] = field(default_factory=Counter)  # of the clients that read to the end
    server_errors: int = 0
    leftovers: Leftovers | None = None
    settle_s: float = 0.0


async def storm(target: Target, clients: int, seed: int = 0, concurrency: int = 200,
                timeout_s: float = 120.0) -> StormResult:
    rng = random.Random(seed)
    result = StormResult(clients)
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        when = rng.choice(WHEN)
        result.plans[when] += 1
        body = orjson.dumps({"model": target.model, "stream": rng.random() < 0.8,
                             "max_tokens": rng.randint(5, 300),
                             "messages": [{"role": "user", "content": f"storm {i}"}]})
        payload = request("POST", "/v1/chat/completions", body, {"authorization": f"Bearer {target.key}"})
        close_after = {"at_once": 0.0, "soon": rng.uniform(0, 0.2), "later": rng.uniform(0.2, 2.0)}.get(when)
        if when == "mid_body":
            payload, close_after = payload[: len(payload) - rng.randint(1, len(body))], 0.0
        async with gate:
            reply = await exchange(target.host, target.port, payload, timeout_s, close_after_s=close_after)
        if when == "never":
            key: int | str = reply.status if reply.status is not None else reply.ending
            result.statuses[key] += 1
            if reply.status is not None and reply.status >= 500:
                result.server_errors += 1

    await asyncio.gather(*(one(i) for i in range(clients)))
    result.leftovers, result.settle_s = await settle(target)
    return result
