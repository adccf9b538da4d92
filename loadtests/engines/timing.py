"""How fast a server answers, cell by cell: closed-loop clients with fixed lengths.

One *cell* is ``concurrency`` clients, each sending ``rounds`` streamed completions back
to back (the first of each client is a warm-up, left out), every prompt ``prompt_tokens``
random three-letter words and every reply exactly ``output_tokens`` long (``max_tokens``
with ``ignore_eos``). A three-letter word of the tiny model's vocabulary and its space are
one token to its word-level tokenizer and to the simulator's count (a token per four
characters), so one grid means the same lengths to both; the prompt tokens each server
counted are reported (``usage``) to show it. Random sequences of a hundred-odd words also
keep every prompt out of the prefix cache (a word the vocabulary lacks would be ``<unk>``
to the tokenizer: every prompt the same tokens, all cache hits).

What is measured per cell, from the client (``docs/loadtests.md`` definitions): TTFT
(send to the first byte of content), TPOT (the rest of the reply over its tokens but
one: robust to a server that merges tokens into one chunk), E2E, and output tokens per
second over the cell's wall time.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson


@dataclass(frozen=True, slots=True)
class Cell:
    concurrency: int
    prompt_tokens: int
    output_tokens: int
    rounds: int = 4  # requests per client, the first a warm-up

    @property
    def name(self) -> str:
        return f"c{self.concurrency}-p{self.prompt_tokens}-o{self.output_tokens}"


@dataclass(frozen=True, slots=True)
class CellResult:
    cell: Cell
    ttft_ms: float  # mean
    ttft_p50_ms: float
    tpot_ms: float  # mean
    e2e_ms: float  # mean
    output_tps: float
    prompt_tokens_counted: int  # what the server's usage said, median
    requests: int  # measured (warm-ups left out)

    def row(self) -> dict[str, Any]:
        out = asdict(self)
        out["cell"] = self.cell.name
        return out


def vocabulary_words(tokenizer_json: Path) -> tuple[str, ...]:
    """The three-letter lower-case words of a word-level tokenizer (``tokenizer.json``)."""
    vocab = orjson.loads(tokenizer_json.read_bytes())["model"]["vocab"]
    return tuple(sorted(w for w in vocab if len(w) == 3 and w.isalpha() and w.islower()))


async def _one(
    client: httpx.AsyncClient, model: str, cell: Cell, rng: random.Random, words: tuple[str, ...]
) -> tuple[float, float, int, int]:
    """(ttft s, e2e s, output tokens, prompt tokens) of one streamed completion."""
    body = {
        "model": model, "prompt": " ".join(rng.choices(words, k=cell.prompt_tokens)), "max_tokens": cell.output_tokens,
        "ignore_eos": True, "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    first = 0.0
    usage: dict[str, int] = {}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = orjson.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"]
            if not first and any(c.get("text") for c in event.get("choices") or ()):
                first = time.perf_counter()
    done = time.perf_counter()
    return first - sent, done - sent, int(usage.get("completion_tokens", 0)), int(usage.get("prompt_tokens", 0))


async def measure(url: str, model: str, cell: Cell, words: tuple[str, ...], seed: int = 0) -> CellResult:
    """Run one cell against ``url`` (an OpenAI-compatible server), prompts drawn from ``words``."""
    limits = httpx.Limits(max_connections=cell.concurrency, max_keepalive_connections=cell.concurrency)
    samples: list[tuple[float, float, int, int]] = []
    tokens = 0  # every request's, warm-ups included: they shared the cell's time
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def run_client(k: int) -> None:
            nonlocal tokens
            rng = random.Random(f"{seed}-{cell.name}-{k}")  # no two cells share a prompt's start
            for r in range(cell.rounds):
                result = await _one(client, model, cell, rng, words)
                tokens += result[2]
                if r:
                    samples.append(result)

        started = time.perf_counter()
        await asyncio.gather(*(run_client(k) for k in range(cell.concurrency)))
        wall = time.perf_counter() - started
    ttfts = [s[0] for s in samples]
    tpots = [(e2e - ttft) / (n - 1) for ttft, e2e, n, _ in samples if n > 1]
    return CellResult(
        cell, 1000 * statistics.fmean(ttfts), 1000 * statistics.median(ttfts),
        1000 * statistics.fmean(tpots) if tpots else 0.0, 1000 * statistics.fmean(s[1] for s in samples),
        tokens / wall, int(statistics.median(s[3] for s in samples)), len(samples),
    )

