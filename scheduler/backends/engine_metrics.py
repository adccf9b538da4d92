"""Read an inference engine's load from its Prometheus ``/metrics`` text.

Only gauges that say how busy the engine is: requests running, requests waiting in
its own queue, and KV-cache usage. Each engine names them differently; a sample
with several label sets (several models) is summed, usage takes the maximum.
"""

from __future__ import annotations

from scheduler.policy.limits import EngineLoad

RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")


def parse(text: str) -> EngineLoad:
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
        if name_end < 0:
            continue
        name = line[:name_end]
        if name not in RUNNING and name not in WAITING and name not in KV_USAGE:
            continue
        rest = line[name_end:]
        if rest.startswith("{"):
            rest = rest.rsplit("}", 1)[-1]
        try:
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            continue
        if name in KV_USAGE:
            sums[name] = max(sums.get(name, 0.0), value)
        else:
            sums[name] = sums.get(name, 0.0) + value
    return EngineLoad(
        running=_first(sums, RUNNING), waiting=_first(sums, WAITING), kv_usage=_first(sums, KV_USAGE)
    )


def _first(sums: dict[str, float], names: tuple[str, ...]) -> float | None:
    for name in names:
        if name in sums:
            return sums[name]
    return None
