"""Slow clients: heads and bodies trickled a byte at a time, connections that send
nothing; meanwhile ``/health`` and a normal request must still be answered."""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from dataclasses import dataclass, field

import orjson

from loadtests.chaos.checks import Target, normal_request
from loadtests.chaos.rawhttp import Reply, exchange, request

KINDS = ["head", "body", "silent"]


@dataclass(slots=True)
class SlowResult:
    clients: int
    cut_off_s: dict[str, list[float]] = field(default_factory=dict)  # kind -> time to the server's answer
    statuses: dict[str, Counter[int | str]] = field(default_factory=dict)
    health_during: int | None = None
    normal_during: int | None = None

    def summary(self) -> dict[str, dict[str, float]]:
        return {k: {"n": len(v), "median_s": statistics.median(v), "max_s": max(v)}
                for k, v in self.cut_off_s.items() if v}


async def slow_clients(target: Target, clients: int, every_s: float = 0.5, timeout_s: float = 120.0) -> SlowResult:
    result = SlowResult(clients)
    body = orjson.dumps({"model": target.model, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]})
    auth = {"authorization": f"Bearer {target.key}"}

    async def one(i: int) -> None:
        kind = KINDS[i % len(KINDS)]
        if kind == "head":
            reply = await exchange(target.host, target.port, request("POST", "/v1/chat/completions", body, auth),
                                   timeout_s, trickle_s=every_s)
        elif kind == "body":
            head = request("POST", "/v1/chat/completions", b"", {**auth, "content-length": str(len(body))})
            reply = await _trickled_body(target, head, body, every_s, timeout_s)
        else:
            reply = await exchange(target.host, target.port, b"", timeout_s)
        result.cut_off_s.setdefault(kind, []).append(reply.elapsed_s)
        key: int | str = reply.status if reply.status is not None else reply.ending
        result.statuses.setdefault(kind, Counter())[key] += 1

    async def meanwhile() -> None:
        await asyncio.sleep(every_s * 2)  # the slow clients are connected by now
        health = await exchange(target.host, target.port, request("GET", "/health"), 30)
        result.health_during = health.status
        result.normal_during = await normal_request(target)

    await asyncio.gather(meanwhile(), *(one(i) for i in range(clients)))
    return result


async def _trickled_body(target: Target, head: bytes, body: bytes, every_s: float, timeout_s: float) -> Reply:
    """The head at once, then the body a byte at a time."""
    return await exchange(target.host, target.port, head + body, timeout_s, trickle_s=every_s,
                          trickle_from=len(head))
