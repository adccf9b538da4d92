"""Counters and histograms, exposed as vLLM-compatible Prometheus text and as ``/sim/stats``.

Metric names, types and histogram buckets follow vLLM's V1 ``PrometheusStatLogger``, so
anything that scrapes vLLM (dashboards, an adaptive limiter) reads the simulator
unchanged. Every sample carries ``model_name``. Aborted requests are counted the way vLLM
counts them: ``vllm:request_success_total{finished_reason="abort"}``.

The text format is written by hand: it is a few lines, and keeps the simulator free of a
process-wide metrics registry.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from simulator.protocol import FinishReason

# vLLM's buckets (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class Histogram:
    """A Prometheus histogram: per-bucket counts (made cumulative when rendered), sum, count."""

    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # last slot is +Inf
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def render(self, name: str, labels: str, out: list[str]) -> None:
        cumulative = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            cumulative += n
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        out.append(f"{name}_count{{{labels}}} {self.count}")


@dataclass(frozen=True, slots=True)
class Gauges:
    """The engine's instantaneous state, read at scrape time."""

    running: int
    waiting: int
    kv_usage: float  # 0..1, slots held by running sequences (cached blocks nobody holds are free)
    cached_tokens: int = 0  # slots of prefix-cache blocks no sequence holds (evictable)


class Metrics:
    """Everything counted since start (or since the last ``reset``)."""

    def __init__(self, model: str, block_size: int = 16) -> None:
        self._labels = f'model_name="{_escape(model)}"'
        self.block_size = block_size  # told as vLLM tells it: a label of cache_config_info
        self.reset(running=0)

    @property
    def labels(self) -> str:
        """The label set every sample carries (``model_name="..."``)."""
        return self._labels

    def reset(self, running: int) -> None:
        self.requests = 0  # generation requests that reached the engine
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.prefill_computed = 0  # prompt tokens run through the model, recomputation included
        self.prefix_queries = 0  # tokens looked up in the prefix cache at admission
        self.prefix_hits = 0  # of those, tokens found cached (prefill skipped)
        self.finished = {reason: 0 for reason in FinishReason}
        self.peak_running = running  # highest number of sequences running at once
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        # what a resume costs, as vLLM tells it (sums and counts: what a reader of rates needs)
        self.prefill_s = 0.0  # from each request's first step to its first token
        self.prefill_requests = 0
        self.prefill_tokens = 0  # prompt tokens computed for them (cache hits not)
        self.itl_sum = 0.0  # between a stream's tokens
        self.itl_count = 0

    def prefilled(self, seconds: float, computed: int) -> None:
        """A request's first token: its prefill took ``seconds`` and computed ``computed`` tokens."""
        self.prefill_s += seconds
        self.prefill_requests += 1
        self.prefill_tokens += computed

    def stats(self, gauges: Gauges) -> dict[str, object]:
        """The ``/sim/stats`` document."""
        return {
            "running": gauges.running,
            "waiting": gauges.waiting,
            "peak_running": self.peak_running,
            "kv_cache_usage": gauges.kv_usage,
            "total_requests": self.requests,
            "completed": self.finished[FinishReason.STOP] + self.finished[FinishReason.LENGTH],
            "aborts": self.finished[FinishReason.ABORT],
            "prompt_tokens": self.prompt_tokens,
            "tokens_generated": self.generation_tokens,
            "preemptions": self.preemptions,
            "prefill_tokens_computed": self.prefill_computed,
            "prefill_tokens_cached": self.prefix_hits,
            "prefix_cache_queries": self.prefix_queries,
            "prefix_cache_tokens": gauges.cached_tokens,
        }

    def render(self, gauges: Gauges) -> str:
        """Prometheus text exposition format 0.0.4."""
        lb = self._labels
        out: list[str] = []

        def metric(name: str, kind: str, help_text: str) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")

        metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
        out.append(f"vllm:num_requests_running{{{lb}}} {gauges.running}")
        metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
        out.append(f"vllm:num_requests_waiting{{{lb}}} {gauges.waiting}")
        metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
        out.append(f"vllm:kv_cache_usage_perc{{{lb}}} {gauges.kv_usage}")
        metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.")
        out.append(f"vllm:num_preemptions_total{{{lb}}} {self.preemptions}")
        metric(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        out.append(f"vllm:prefix_cache_queries_total{{{lb}}} {self.prefix_queries}")
        metric(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
        )
        out.append(f"vllm:prefix_cache_hits_total{{{lb}}} {self.prefix_hits}")
        metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.")
        out.append(f"vllm:prompt_tokens_total{{{lb}}} {self.prompt_tokens}")
        metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.")
        out.append(f"vllm:generation_tokens_total{{{lb}}} {self.generation_tokens}")
        metric("vllm:request_success_total", "counter", "Count of successfully processed requests.")
        for reason, n in self.finished.items():
            out.append(f'vllm:request_success_total{{finished_reason="{reason}",{lb}}} {n}')
        metric(
            "vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds."
        )
        self.ttft.render("vllm:time_to_first_token_seconds", lb, out)
        metric(
            "vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds."
        )
        self.e2e.render("vllm:e2e_request_latency_seconds", lb, out)
        metric("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
        out.append(f'vllm:cache_config_info{{block_size="{self.block_size}",enable_prefix_caching="True"}} 1.0')
        for name, total, count, help_text in (
            ("vllm:request_prefill_time_seconds", self.prefill_s, self.prefill_requests,
             "Seconds requests spent in prefill."),
            ("vllm:request_prefill_kv_computed_tokens", self.prefill_tokens, self.prefill_requests,
             "Prompt tokens computed in prefill (cache hits not)."),
            ("vllm:inter_token_latency_seconds", self.itl_sum, self.itl_count, "Seconds between output tokens."),
        ):
            metric(name, "summary", help_text)
            out.append(f"{name}_sum{{{lb}}} {total}")
            out.append(f"{name}_count{{{lb}}} {count}")
        out.append("")
        return "\n".join(out)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
