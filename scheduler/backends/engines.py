"""Engine profiles: what each inference server calls things, in one table.

A backend's ``engine`` (configured, or detected from what it answers) selects:

- the Prometheus gauges the adaptive limit reads (requests running, requests waiting
  in the engine's own queue, KV-cache usage), in the order they are tried;
- which way the ``priority`` field runs when ``engine_priority`` is on: vLLM's
  ``--scheduling-policy priority`` runs *lower* values first; SGLang runs *higher*
  values first unless started with ``--schedule-low-priority-values-first``;
  engines without a priority field are sent none;
- a starting ``max_concurrency`` for engines with few parallel slots (Ollama runs
  ``OLLAMA_NUM_PARALLEL`` requests at once, 4 by default on most machines), used
  only when the configuration did not set one.

Detection reads, most trusted first: the metric names in ``/metrics`` (each engine
has its own prefix), the ``owned_by`` of the models in ``/v1/models``, then the
``server`` header. vLLM and SGLang both run on uvicorn, so that header alone tells
neither. Nothing recognised: the neutral profile, which reads every gauge it knows
and sends priorities as configured, lower first.

Names checked against each engine's source: vLLM ``vllm/v1/metrics/loggers.py``;
SGLang ``python/sglang/srt/metrics/collector.py`` (``sglang:``; exporters that do
not allow a colon write ``sglang_``); llama.cpp ``tools/server`` (``--metrics``);
TGI ``router/src`` (``tgi_queue_size``, ``tgi_batch_current_size``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from scheduler.backends.engine_costs import VLLM_COSTS, CostNames
from scheduler.types import ResumeMode


class Engine(enum.StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    OLLAMA = "ollama"
    OPENAI = "openai"  # a hosted OpenAI-compatible API: no metrics, no priority field


@dataclass(frozen=True, slots=True)
class EngineProfile:
    engine: Engine | None  # None: the neutral profile (nothing recognised)
    running: tuple[str, ...] = ()  # gauges of requests running, first found wins
    waiting: tuple[str, ...] = ()  # gauges of requests waiting in the engine's queue
    kv_usage: tuple[str, ...] = ()  # gauges of KV-cache usage, 0..1
    priority_field: bool = True  # the engine reads a request's `priority`
    higher_first: bool = False  # a larger `priority` runs sooner
    max_concurrency: int | None = None  # a starting limit when none is configured
    metrics: bool = True  # it may serve Prometheus /metrics
    metric_prefixes: tuple[str, ...] = ()  # a metric name with one of these names the engine
    owned_by: tuple[str, ...] = ()  # /v1/models owned_by values that name the engine
    server: tuple[str, ...] = ()  # `server` header prefixes (lower case) that name the engine
    costs: CostNames | None = None  # the counters that tell what a resume costs it

    @property
    def name(self) -> str:
        return self.engine.value if self.engine is not None else "unknown"

    def names(self) -> frozenset[str]:
        return frozenset(self.running + self.waiting + self.kv_usage)


VLLM = EngineProfile(
    Engine.VLLM,
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # V1 name, then V0's
    metric_prefixes=("vllm:",),
    owned_by=("vllm",),
    server=("vllm",),
    costs=VLLM_COSTS,
)
SGLANG = EngineProfile(
    Engine.SGLANG,
    running=("sglang:num_running_reqs", "sglang_num_running_reqs"),
    waiting=("sglang:num_queue_reqs", "sglang_num_queue_reqs"),
    kv_usage=("sglang:token_usage", "sglang_token_usage"),
    higher_first=True,
    metric_prefixes=("sglang:", "sglang_"),
    owned_by=("sglang",),
    server=("sglang",),
)
TGI = EngineProfile(
    Engine.TGI,
    running=("tgi_batch_current_size",),
    waiting=("tgi_queue_size",),
    priority_field=False,
    metric_prefixes=("tgi_",),
    owned_by=("text-generation-inference", "tgi"),
    server=("text-generation-inference",),
)
LLAMACPP = EngineProfile(
    Engine.LLAMACPP,
    running=("llamacpp:requests_processing",),
    waiting=("llamacpp:requests_deferred",),
    kv_usage=("llamacpp:kv_cache_usage_ratio",),  # older builds; newer ones dropped it
    priority_field=False,
    metric_prefixes=("llamacpp:",),
    owned_by=("llamacpp",),
    server=("llama.cpp",),
)
OLLAMA = EngineProfile(
    Engine.OLLAMA, priority_field=False, max_concurrency=4, metrics=False, owned_by=("library", "ollama"),
    server=("ollama",),
)
OPENAI = EngineProfile(Engine.OPENAI, priority_field=False, metrics=False, owned_by=("openai", "system"))

PROFILES: dict[Engine, EngineProfile] = {
    p.engine: p for p in (VLLM, SGLANG, TGI, LLAMACPP, OLLAMA, OPENAI) if p.engine is not None
}

# Nothing recognised: read every gauge any engine names; priorities as configured.
NEUTRAL = EngineProfile(
    None,
    running=tuple(n for p in PROFILES.values() for n in p.running),
    waiting=tuple(n for p in PROFILES.values() for n in p.waiting),
    kv_usage=tuple(n for p in PROFILES.values() for n in p.kv_usage),
)


# How each ``resume`` mode continues a paused generation. Every mode can carry the text so
# far (on chat a final assistant message with ``continue_final_message``, on completions
# the prompt followed by the text). Those named here can also resume exactly, from token
# ids: a stream asks for the ids of the tokens it makes (these fields), and the
# continuation sends them back as a ``/v1/completions`` prompt, so the engine reads
# exactly the tokens it made (and its prefix cache holds) instead of the text
# re-tokenised. vLLM (``return_token_ids``) tells the prompt's ids on the first chunk and
# each chunk's own; llama.cpp tells only the sampled token's, as the one entry of its
# ``logprobs`` (``post_sampling_probs``: read from the sampler, without a softmax over the
# vocabulary), and its continuation is the prompt's text followed by the ids (a mixed
# prompt). Where a stream did not carry every id, or the request needs the text (stop
# strings, a reasoning or tool parser), the text resume stands in
# (``gateway/request/resume.py``, ``gateway/request/token_ids.py``).
IDS_ASK: dict[ResumeMode, dict[str, Any]] = {
    ResumeMode.VLLM: {"return_token_ids": True},
    ResumeMode.LLAMACPP: {"n_probs": 1, "post_sampling_probs": True},
}
TOKEN_RESUME: frozenset[ResumeMode] = frozenset(IDS_ASK)
IDS_IN_LOGPROBS: frozenset[ResumeMode] = frozenset({ResumeMode.LLAMACPP})  # and the prompt's not told
# How a stream that may be paused learns how many tokens it has made (chunks are not
# tokens: servers merge them when they fall behind, or hold back part of a character):
# vLLM and SGLang put a running usage on every chunk (``stream_options.continuous_usage_stats``);
# llama.cpp its ``timings`` with ``predicted_n`` (``timings_per_token``).
COUNT_BY_TIMINGS: frozenset[ResumeMode] = frozenset({ResumeMode.LLAMACPP})


def priority_value(p: EngineProfile, order: str, priority: int) -> int | None:
    """What ``priority`` does an engine get for the gateway's order ``priority`` (lower
    runs first)? ``order``: ``auto`` (the engine's own direction), ``lower_first`` or
    ``higher_first`` (configured, for an engine started the other way round). None: the
    engine reads no such field, so none is sent."""
    if order == "auto":
        if not p.priority_field:
            return None
        order = "higher_first" if p.higher_first else "lower_first"
    return -priority if order == "higher_first" else priority


def profile(engine: Engine | str | None) -> EngineProfile:
    return NEUTRAL if engine is None else PROFILES[Engine(engine)]


def _metric_names(text: str) -> Iterable[str]:
    for line in text.splitlines():
        if not line:
            continue
        if line[0] == "#":  # "# TYPE name kind": names an engine before it has samples
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "TYPE":
                yield parts[2]
            continue
        yield line.split("{", 1)[0].split(" ", 1)[0]


def detect(metrics: str | None, owned_by: Iterable[str] = (), server: str | None = None) -> tuple[Engine, str] | None:
    """Which engine is this? The engine and what told it, or None when nothing did."""
    if metrics:
        for name in _metric_names(metrics):
            for engine, p in PROFILES.items():
                if any(name.startswith(prefix) for prefix in p.metric_prefixes):
                    return engine, "metrics"
    owners = {o.lower() for o in owned_by}
    for engine, p in PROFILES.items():
        if owners & set(p.owned_by):
            return engine, "owned_by"
    if server:
        lowered = server.lower()
        for engine, p in PROFILES.items():
            if any(lowered.startswith(s) for s in p.server):
                return engine, "server header"
    return None
