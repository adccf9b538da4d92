"""Measure a profile the way a benchmark client would, to check it against its sources.

``python -m simulator.calibrate --profile llama-8b-h100`` drives the engine in-process
(no HTTP, so only the timing model is measured) with closed-loop clients: each of
``c`` clients sends requests back to back. Output lengths vary uniformly around the
target (0.5x to 1.5x, seeded), so clients drift apart as they do against a real server
instead of prefilling in lock-step; each client's first request is a warm-up and left
out of TTFT and ITL. It prints TTFT, ITL and output throughput per concurrency as a
Markdown table; docs/simulator.md quotes its output.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
from dataclasses import dataclass

from simulator.engine import Engine
from simulator.metrics import Metrics
from simulator.profiles import BUILTIN_PROFILES, Profile
from simulator.protocol import FinishReason
from simulator.sequence import Sequence


@dataclass(frozen=True, slots=True)
class LevelResult:
    concurrency: int
    ttft_ms: float  # mean
    itl_ms: float  # mean of all gaps between tokens
    output_tps: float  # output tokens per second over the whole level


async def _one(engine: Engine, prompt: int, output: int, ttfts: list[float], gaps: list[float]) -> None:
    loop = asyncio.get_running_loop()
    seq = Sequence(prompt, output, FinishReason.LENGTH, streamed=True, arrival=loop.time())
    engine.submit(seq)
    seen = 0
    last = seq.arrival
    while seen < output:
        await seq.wait()
        now = loop.time()
        if seq.generated > seen:
            if seen == 0:
                ttfts.append(now - seq.arrival)
            else:
                gaps.append(now - last)
            # Tokens that arrived together (a late wake-up) count as zero gaps.
            gaps.extend([0.0] * (seq.generated - seen - 1))
            seen = seq.generated
            last = now


async def measure(profile: Profile, concurrency: int, rounds: int, prompt: int, output: int) -> LevelResult:
    engine = Engine(profile, Metrics(profile.name))
    engine.start()
    ttfts: list[float] = []
    gaps: list[float] = []

    rng = random.Random(concurrency)
    loop = asyncio.get_running_loop()
    # Throughput is measured in the steady window: from the moment every client has
    # finished its warm-up request to the moment the first client is done.
    warmed = 0
    window: list[tuple[float, int]] = []

    def mark() -> None:
        window.append((loop.time(), engine.metrics.generation_tokens))

    async def client() -> None:
        nonlocal warmed
        for i in range(rounds):
            n = rng.randint(output // 2, output * 3 // 2)
            sink_ttft, sink_gaps = (ttfts, gaps) if i else ([], [])
            await _one(engine, prompt, n, sink_ttft, sink_gaps)
            if i == 0:
                warmed += 1
                if warmed == concurrency:
                    mark()
        if len(window) == 1:
            mark()

    await asyncio.gather(*(client() for _ in range(concurrency)))
    await engine.stop()
    (t0, n0), (t1, n1) = window[0], window[1]
    return LevelResult(
        concurrency=concurrency,
        ttft_ms=statistics.mean(ttfts) * 1000,
        itl_ms=statistics.mean(gaps) * 1000,
        output_tps=(n1 - n0) / (t1 - t0),
    )


async def _main(args: argparse.Namespace) -> None:
    profile = BUILTIN_PROFILES[args.profile]
    print(f"profile {profile.name}: prompt {args.prompt} tokens, output {args.output} tokens")
    print("| concurrency | TTFT ms | ITL ms | output tok/s |")
    print("| ---: | ---: | ---: | ---: |")
    for c in args.concurrency:
        r = await measure(profile, c, args.rounds, args.prompt, args.output)
        print(f"| {r.concurrency} | {r.ttft_ms:.1f} | {r.itl_ms:.2f} | {r.output_tps:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m simulator.calibrate", description=__doc__)
    parser.add_argument("--profile", default="llama-8b-h100", choices=sorted(BUILTIN_PROFILES))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 5, 8, 25, 32, 50, 64, 100])
    parser.add_argument("--rounds", type=int, default=4, help="requests per client (the first is a warm-up)")
    parser.add_argument("--prompt", type=int, default=200, help="prompt tokens per request")
    parser.add_argument("--output", type=int, default=200, help="mean output tokens per request")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
