"""The most chunks per second one gateway worker relays before it adds more than
1 ms to the inter-token latency p99.

Long streams (``max_tokens`` tokens, one token per 0.5 ms simulator step) are held
open at rising concurrency, first straight against the simulator, then through the
gateway. At each level the added ITL p99 is the gateway's minus direct's; the answer
is the highest chunk rate the gateway delivered at a level within the bound, below the
first level that missed it.
The gateway's CPU time per relayed chunk is reported beside it, so the rate one
fully used core would reach (``1e6 / cpu_us_per_chunk``) can be read off too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtests.overhead.steps import Workload, relay_step
from loadtests.overhead.targets import Target

ADDED_ITL_BOUND_MS = 1.0


def relay_experiment(direct: Target, gateway: Target, levels: list[int], duration_s: float, max_tokens: int,
                     workload: Workload, cpus: list[int], workdir: Path, log: Any = print,
                     between: Callable[[], object] = lambda: None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    best = 0.0
    passed = False
    for level in levels:  # bounded by the list given
        between()
        base = relay_step(direct, level, max_tokens, duration_s, workload, cpus, workdir / f"relay-direct-{level}")
        between()
        via = relay_step(gateway, level, max_tokens, duration_s, workload, cpus,
                         workdir / f"relay-{gateway.name}-{level}")
        added = via.get("itl_ms", {}).get("p99", float("nan")) - base.get("itl_ms", {}).get("p99", float("nan"))
        within = added <= ADDED_ITL_BOUND_MS and not via.get("errors") and "worker_error" not in via
        row = {
            "concurrency": level,
            "direct_chunks_per_s": base.get("chunks_per_s"),
            "chunks_per_s": via.get("chunks_per_s"),
            "direct_itl_p99_ms": base.get("itl_ms", {}).get("p99"),
            "itl_p99_ms": via.get("itl_ms", {}).get("p99"),
            "added_itl_p99_ms": added,
            "errors": via.get("errors"),
            "gateway_cpu_us_per_chunk": via.get("cpu_us_per_chunk"),
            "generator_cpu_pct": via.get("generator_cpu_pct"),
            "within_bound": within,
        }
        rows.append(row)
        log(f"relay c={level}: direct {row['direct_chunks_per_s']:.0f}/s, {gateway.name} "
            f"{row['chunks_per_s']:.0f}/s, added ITL p99 {added:.2f} ms")
        if within and not passed:  # "before it passes": levels after the first miss do not count
            best = max(best, float(via.get("chunks_per_s") or 0.0))
        passed = passed or not within
    return {"target": gateway.name, "bound_ms": ADDED_ITL_BOUND_MS, "max_tokens": max_tokens,
            "relay_chunks_per_s": best, "levels": rows}
