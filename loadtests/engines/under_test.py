"""The real engine a benchmark runs against: started for the run, and its own counters.

``bench compare --engine vllm|llamacpp`` (``bench.py``) starts one of them here — vLLM's
CPU build or llama.cpp's ``llama-server``, serving the tiny random-weight Llama — and
reads what the engine itself counted over each run (``engine_accounting``): the prompt
tokens it was sent, found in its prefix cache and computed, and the output tokens it
generated against those the clients were delivered. Each engine names its counters
differently and counts different things (llama.cpp has no prefix-cache counters; it
counts the prompt tokens it evaluated, a slot's reused prefix not among them): what an
engine does not count is None, never a guess.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from loadtests.compare_options import CompareConfig, CompareError
from loadtests.engines import llamacpp
from loadtests.engines.vllm import (
    EngineUnavailable,
    VllmSpec,
    build_model,
    find_python,
    metric,
    running_vllm,
    vllm_version,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Counters:
    """An engine's own counters of one run's work (None: it does not count that)."""

    generated: str  # output tokens it generated
    prompt: str | None = None  # prompt tokens it was sent, cached included
    cached: str | None = None  # of those, found in its prefix cache
    computed: str | None = None  # prompt tokens it computed, where it counts them itself
    queries: str | None = None  # prefix-cache lookups (tokens)
    hits: str | None = None  # prefix-cache hits (tokens)


VLLM_COUNTERS = Counters(
    generated="vllm:generation_tokens_total", prompt="vllm:prompt_tokens_total",
    cached="vllm:prompt_tokens_cached_total", queries="vllm:prefix_cache_queries_total",
    hits="vllm:prefix_cache_hits_total",
)
# llama.cpp counts the prompt tokens it evaluated (a slot's reused prefix is not evaluated)
LLAMACPP_COUNTERS = Counters(generated="llamacpp:tokens_predicted_total", computed="llamacpp:prompt_tokens_total")


@dataclass
class Engine:
    """The engine under test, started: where it answers, how to read its counters."""

    label: str  # name and version
    url: str
    pid: int  # its process group
    started_s: float
    metrics: Callable[[], dict[str, float]]
    counters: Counters
    resume: str  # the backends' ``resume`` in the modes that pause
    tokenize: str  # its /tokenize dialect, for the sidecar
    model: str  # what was served
    # brings it back to a fresh start's state before each measured arm (its caches empty),
    # so that no arm finds the prompts an earlier arm left cached (every arm replays the
    # same trace); None: it cannot be, and later arms find them
    reset: Callable[[], None] | None = None


def keep_apart(engine_cpus: set[int]) -> set[int]:
    """Move this process onto the CPUs the engine does not get, so that everything it starts
    from now on (gateways, the sidecar, Valkey, the load generator) runs there: the engine's
    compute threads spin between steps, and a process that wakes on their core stalls them.
    Returns the CPUs left to the rest (no engine CPUs: all of them, nothing is moved)."""
    everything = os.sched_getaffinity(0)
    others = everything - engine_cpus
    if not engine_cpus:
        return everything
    if not others or not engine_cpus <= everything:
        raise CompareError(f"--engine-cpus {sorted(engine_cpus)}: this process may run on {sorted(everything)}; "
                           "the engine needs some of them and the rest at least one")
    os.sched_setaffinity(0, others)
    return others


def start_engine(name: str, cfg: CompareConfig, model_dir: str | None, logs: Path, stack: ExitStack,
                 cpus: set[int] | None = None) -> Engine:
    """Start ``name`` (``vllm`` or ``llamacpp``) for the ``with`` block of ``stack``, serving the
    tiny model built in ``model_dir`` (default OUT/model); ``cpus``: its compute on those CPUs
    only (vLLM binds its OpenMP threads there; llama.cpp is started on them)."""
    model_path = Path(model_dir or cfg.out / "model").resolve()
    try:
        if name == "llamacpp":
            found = llamacpp.find()
            gguf = llamacpp.build_model(found, model_path)
            # every slot holds a prompt and the longest reply of the workload
            spec = llamacpp.LlamaSpec(gguf, parallel=cfg.sim.max_num_seqs, ctx_size=cfg.sim.max_num_seqs * 16384)
            server = on_cpus(cpus, lambda: stack.enter_context(
                llamacpp.running_llamacpp(spec, found, logs / "llama-server.log")))
            # a restart takes well under a second and empties its slots and its prompt cache
            return Engine(llamacpp.version(found), server.url, server.proc.pid, server.started_s, server.metrics,
                          LLAMACPP_COUNTERS, "llamacpp", "llamacpp",
                          "tiny random-weight Llama as GGUF (loadtests/engines/tiny_gguf.py)",
                          reset=lambda: on_cpus(cpus, server.restart))
        python = find_python()
        version = vllm_version(python)
        spec_v = VllmSpec(model_dir=build_model(python, model_path), max_num_seqs=cfg.sim.max_num_seqs,
                          max_model_len=16384, kv_cache_bytes=1 << 30,
                          cpus=",".join(map(str, sorted(cpus))) if cpus else None)
        vllm = stack.enter_context(running_vllm(spec_v, python, logs / "vllm.log"))
        return Engine(f"vllm {version}", vllm.url, vllm.proc.pid, vllm.started_s, vllm.metrics, VLLM_COUNTERS,
                      "vllm", "vllm", "tiny random-weight Llama (loadtests/engines/tiny_model.py)")
    except EngineUnavailable as exc:
        raise CompareError(str(exc)) from None



def on_cpus(cpus: set[int] | None, start: Callable[[], T]) -> T:
    """``start()`` with this process on ``cpus`` (None or empty: where it is): the threads
    an engine makes at start stay where they were made."""
    mine = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        return start()
    finally:
        os.sched_setaffinity(0, mine)


def engine_accounting(before: dict[str, float], after: dict[str, float], records: list[dict[str, Any]],
                      names: Counters = VLLM_COUNTERS) -> dict[str, Any]:
    """What the engine itself counted over one run (its ``/metrics`` before and after):
    prompt tokens it was sent, found in its prefix cache, and computed; output tokens it
    generated, against those the clients were delivered (every request of the run). What
    an engine does not count is None."""

    def delta(name: str | None) -> float | None:
        return None if name is None else metric(after, name) - metric(before, name)

    prompt, cached, computed = delta(names.prompt), delta(names.cached), delta(names.computed)
    if computed is None and prompt is not None and cached is not None:
        computed = prompt - cached
    queries, hits = delta(names.queries), delta(names.hits)
    generated = delta(names.generated) or 0.0
    delivered = sum(int(r.get("output_tokens") or 0) for r in records)

    def whole(x: float | None) -> int | None:
        return None if x is None else int(x)

    return {"prompt_tokens": whole(prompt), "prompt_cached": whole(cached), "prompt_computed": whole(computed),
            "hit_share": round(hits / queries, 4) if queries and hits is not None else None,
            "generated": int(generated), "delivered": delivered,
            "generated_vs_delivered": round(generated / delivered, 4) if delivered else None}
