"""Engine profiles: the numbers that make the simulator behave like one real deployment.

A profile is a timing model plus capacity limits. One engine step costs::

    step_base_s
    + step_per_seq_s       * sequences in the step
    + step_per_ctx_token_s * context tokens those sequences attend over
    + prefill_per_token_s  * prompt tokens computed in the step

Decoding is memory-bound: every step reads all weights once (the base), plus each
sequence's KV cache (the context term). Prefill is compute-bound, so it is charged per
prompt token. Where each number comes from is written down in ``docs/simulator.md``;
the comments here only say what the number stands for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from types import MappingProxyType


class BatchingMode(enum.StrEnum):
    """How the engine admits new sequences into the running batch."""

    CONTINUOUS = "continuous"  # iteration-level: a free slot is refilled at the next step (vLLM, TGI, SGLang)
    STATIC = "static"  # request-level: a batch is admitted only when the engine is idle


@dataclass(frozen=True, slots=True)
class Profile:
    """Timing model, capacity and workload defaults of one simulated deployment."""

    name: str
    step_base_s: float  # one forward pass with a tiny batch: weight reads, kernel launches
    step_per_seq_s: float  # extra time per sequence in the step (sampling, per-row work)
    step_per_ctx_token_s: float  # extra time per context token read by attention
    prefill_per_token_s: float  # extra time per prompt token computed in the step
    max_num_seqs: int  # sequences running at once (vLLM --max-num-seqs)
    max_num_batched_tokens: int  # token budget of one step, chunks long prefills (vLLM's name)
    kv_capacity_tokens: int  # KV-cache slots, in tokens, across all sequences
    max_model_len: int  # prompt + output may not exceed this
    median_output_tokens: int  # median of the natural (EOS-terminated) output length
    output_sigma: float = 0.9  # spread of the log-normal output length
    mode: BatchingMode = BatchingMode.CONTINUOUS
    seed: int = 0  # mixes into the output-length hash, so two simulators can disagree on purpose
    prefix_caching: bool = True  # vLLM's automatic prefix caching (on by default there too)
    block_size: int = 16  # tokens per KV block, the unit the prefix cache shares (vLLM's default)
    request_overhead_s: float = 0.0  # in the server before the engine sees it; holds no slot

    def step_seconds(self, n_seqs: int, ctx_tokens: int, prefill_tokens: int) -> float:
        """Duration of one engine step with this batch."""
        return (
            self.step_base_s
            + self.step_per_seq_s * n_seqs
            + self.step_per_ctx_token_s * ctx_tokens
            + self.prefill_per_token_s * prefill_tokens
        )

    def scaled(self, factor: float) -> Profile:
        """The same profile with every duration multiplied by ``factor``."""
        return replace(
            self,
            step_base_s=self.step_base_s * factor,
            step_per_seq_s=self.step_per_seq_s * factor,
            step_per_ctx_token_s=self.step_per_ctx_token_s * factor,
            prefill_per_token_s=self.prefill_per_token_s * factor,
            request_overhead_s=self.request_overhead_s * factor,
        )


# Llama 3.1 8B on one H100 80GB. Fitted to NVIDIA's published NIM benchmark table
# (Llama-3.1-8b-instruct, v1.3.0): ITL 4.37 ms at concurrency 1 rising to 8.62 ms at 100,
# TTFT about 9 ms for a short prompt. KV capacity: 0.9 x 80 GB minus 16 GB of BF16 weights
# and ~4 GB activations leaves ~52 GB; Llama-3-8B keeps 128 KiB of KV per token
# (2 x 32 layers x 8 KV heads x 128 dims x 2 bytes), so about 400k tokens.
LLAMA_8B_H100 = Profile(
    name="llama-8b-h100",
    step_base_s=0.0043,
    step_per_seq_s=0.000018,
    step_per_ctx_token_s=0.00000003,
    prefill_per_token_s=0.0000234,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
    kv_capacity_tokens=400_000,
    max_model_len=131_072,
    median_output_tokens=200,
)

# Llama 3.1 70B, tensor parallel over four H100 80GB. Fitted to the same NIM table
# (Llama-3.1-70b-instruct, v1.3.0): ITL 13.2 ms at concurrency 1, 15.3 ms at 25,
# 23.3 ms at 100; TTFT 25 ms. KV: 320 KiB per token over 80 layers, split four ways;
# ~33 GB free per GPU after 35 GB of weights gives about 400k tokens.
LLAMA_70B_4XH100 = Profile(
    name="llama-70b-4xh100",
    step_base_s=0.0128,
    step_per_seq_s=0.000030,
    step_per_ctx_token_s=0.00000005,
    prefill_per_token_s=0.000060,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
    kv_capacity_tokens=400_000,
    max_model_len=131_072,
    median_output_tokens=200,
)

# Tests: about 1 ms per step, short outputs, a batch small enough to fill.
FAST = Profile(
    name="fast",
    step_base_s=0.001,
    step_per_seq_s=0.00001,
    step_per_ctx_token_s=0.0,
    prefill_per_token_s=0.000002,
    max_num_seqs=64,
    max_num_batched_tokens=2048,
    kv_capacity_tokens=1_000_000,
    max_model_len=32_768,
    median_output_tokens=24,
    output_sigma=0.6,
)

# Gateway overhead benchmarks: a constant 0.5 ms per step (so TTFT and ITL are both one
# step), no batch or context cost, room for everything. The simulator should never be
# the bottleneck of a benchmark that uses this profile. Prefill is free here, so a prefix
# cache would save nothing; it is off, sparing the hashing and a cache of up to 6M blocks.
INSTANT = Profile(
    name="instant",
    step_base_s=0.0005,
    step_per_seq_s=0.0,
    step_per_ctx_token_s=0.0,
    prefill_per_token_s=0.0,
    max_num_seqs=4096,
    max_num_batched_tokens=1_000_000,
    kv_capacity_tokens=100_000_000,
    max_model_len=131_072,
    median_output_tokens=16,
    output_sigma=0.5,
    prefix_caching=False,
)

# vLLM 0.32's CPU build serving the tiny random-weight Llama of loadtests/engines/tiny_model.py
# on a 2-core machine (--max-num-seqs 8, --max-model-len 16384, 1 GiB of KV cache: 349,440
# tokens in 128-token blocks; 2,048 batched tokens a step, its CPU default): the engine of
# docs/benchmarks/engine-vllm.md. Fitted by loadtests/engines/calibration.py; the grid, the
# fit and how far the simulator still is from the engine: docs/simulator.md.
VLLM_CPU_TINY = Profile(
    name="vllm-cpu-tiny",
    step_base_s=0.00383,
    step_per_seq_s=0.000086,
    step_per_ctx_token_s=0.000000556,
    prefill_per_token_s=0.0000691,
    max_num_seqs=8,
    max_num_batched_tokens=2048,
    kv_capacity_tokens=349_440,
    max_model_len=16_384,
    median_output_tokens=200,
    block_size=128,
    request_overhead_s=0.00716,
)

BUILTIN_PROFILES: MappingProxyType[str, Profile] = MappingProxyType(
    {p.name: p for p in (LLAMA_8B_H100, LLAMA_70B_4XH100, FAST, INSTANT, VLLM_CPU_TINY)}
)


def get_profile(name: str) -> Profile:
    """The built-in profile called ``name``; ``KeyError`` lists the known ones."""
    try:
        return BUILTIN_PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_PROFILES))
        raise KeyError(f"unknown profile {name!r} (known: {known})") from None
