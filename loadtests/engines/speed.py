"""How fast the engine is right now: a fixed piece of work sent straight to it.

A benchmark's loads are shares of a capacity measured once, at its start. On a shared
machine the engine's speed can drift by more than the effect measured (on one 2-core VM,
the same trace's FIFO arms ran at 8 and at 19 ms a token), and at 100% of capacity a
slower stretch is a queue that never drains. So ``bench compare --engine`` times the same
work (``streams`` greedy requests of ``tokens`` tokens at once, straight to the engine:
no gateway, no sidecar) after the capacity is measured and before and after every arm,
and the report sets each arm's speed beside the capacity's: an arm whose engine ran
slower than at the capacity's measurement ran at more than its nominal load.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

STREAMS = 8
TOKENS = 64
ROUNDS = 2  # the faster counts: the first request after a restart pays for warming up


def work(model: str, i: int, tokens: int = TOKENS) -> dict[str, Any]:
    """The ``i``-th request of the fixed work: greedy, exactly ``tokens`` tokens, not streamed."""
    return {"model": model, "messages": [{"role": "user", "content": f"Count to {i + 3}."}],
            "max_tokens": tokens, "ignore_eos": True, "temperature": 0, "stream": False}


async def timed(url: str, model: str, streams: int = STREAMS, tokens: int = TOKENS) -> tuple[int, float]:
    """One round of the fixed work: the output tokens the engine says it made, and the seconds."""
    async with httpx.AsyncClient(timeout=120) as client:
        start = time.perf_counter()
        answers = await asyncio.gather(*(client.post(f"{url}/v1/chat/completions", json=work(model, i, tokens))
                                         for i in range(streams)))
        wall = time.perf_counter() - start
    made = 0
    for a in answers:
        a.raise_for_status()
        made += int(a.json()["usage"]["completion_tokens"])
    return made, wall


def measure(url: str, model: str, streams: int = STREAMS, tokens: int = TOKENS, rounds: int = ROUNDS) -> float:
    """Output tokens a second the engine at ``url`` makes of the fixed work (the best of
    ``rounds``)."""
    rates = []
    for _ in range(rounds):
        made, wall = asyncio.run(timed(url, model, streams, tokens))
        rates.append(made / wall)
    return round(max(rates), 1)


def beside(before: float, after: float, reference: float) -> dict[str, float]:
    """An arm's engine speed: before and after it, and the slower of the two over the
    speed measured with the capacity (below 1: the arm ran at more than its nominal load)."""
    return {"before": before, "after": after,
            "vs_capacity": round(min(before, after) / reference, 3) if reference > 0 else 0.0}
