"""The simulator's counters as vLLM-compatible Prometheus text and as ``/sim/stats``,
read back with the Prometheus parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from simulator.metrics import E2E_BUCKETS, TTFT_BUCKETS, Gauges, Histogram, Metrics
from simulator.protocol import FinishReason


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_histogram_buckets_hold_their_upper_bound() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.1, 0.5, 2.0):
        h.observe(v)
    assert h.counts == [1, 1, 1] and h.count == 3 and h.total == 2.6


def test_the_text_is_vllms_names_with_the_model_label() -> None:
    m = Metrics('my "model"')
    m.requests, m.generation_tokens, m.prompt_tokens, m.preemptions = 3, 40, 30, 1
    m.finished[FinishReason.STOP] = 2
    m.finished[FinishReason.ABORT] = 1
    m.ttft.observe(0.03)
    m.e2e.observe(1.2)
    text = m.render(Gauges(running=2, waiting=1, kv_usage=0.25, cached_tokens=16))

    f = families(text)
    labelled = {s.labels["model_name"] for name, samples in f.items() for s in samples if name != "vllm:cache_config_info"}
    assert labelled == {'my "model"'}  # escaped, read back (the cache config, as vLLM's, has none)
    assert f["vllm:num_requests_running"][0].value == 2 and f["vllm:num_requests_waiting"][0].value == 1
    assert f["vllm:kv_cache_usage_perc"][0].value == 0.25
    assert f["vllm:generation_tokens"][0].value == 40 and f["vllm:num_preemptions"][0].value == 1
    success = {s.labels["finished_reason"]: s.value for s in f["vllm:request_success"]}
    assert success == {"stop": 2, "length": 0, "abort": 1}
    ttft = [s for s in f["vllm:time_to_first_token_seconds"] if s.name.endswith("_bucket")]
    assert len(ttft) == len(TTFT_BUCKETS) + 1
    assert [s.value for s in ttft] == sorted(s.value for s in ttft)  # cumulative
    assert {s.labels["le"]: s.value for s in ttft}["0.04"] == 1 and {s.labels["le"]: s.value for s in ttft}["0.02"] == 0
    e2e_count = [s for s in f["vllm:e2e_request_latency_seconds"] if s.name.endswith("_count")]
    assert e2e_count[0].value == 1 and len(E2E_BUCKETS) > 0


def test_stats_and_reset() -> None:
    m = Metrics("m")
    m.requests, m.prefix_hits = 5, 12
    m.finished[FinishReason.LENGTH] = 2
    m.finished[FinishReason.STOP] = 1
    stats = m.stats(Gauges(running=1, waiting=0, kv_usage=0.5, cached_tokens=8))
    assert (stats["total_requests"], stats["completed"], stats["aborts"]) == (5, 3, 0)
    assert (stats["prefill_tokens_cached"], stats["prefix_cache_tokens"], stats["kv_cache_usage"]) == (12, 8, 0.5)
    m.reset(running=4)
    assert m.requests == 0 and m.peak_running == 4 and m.ttft.count == 0 and sum(m.finished.values()) == 0


def test_what_a_resume_costs_is_told_as_vllm_tells_it_and_read_by_the_gateway() -> None:
    """The simulator's prefill and inter-token counters and its block size, in vLLM's
    names: the gateway's cost meter reads them as it reads vLLM's."""
    from scheduler.backends.engine_costs import VLLM_COSTS, CostMeter

    m = Metrics("m", block_size=32)
    meter = CostMeter(VLLM_COSTS)
    meter.observe(m.render(Gauges(running=0, waiting=0, kv_usage=0.0)))
    m.prefilled(0.2, 400)
    m.prefilled(0.1, 100)
    m.itl_sum, m.itl_count = 2.0, 100
    text = m.render(Gauges(running=0, waiting=0, kv_usage=0.0))
    f = families(text)
    prefill = {s.name: s.value for s in f["vllm:request_prefill_time_seconds"]}
    assert prefill["vllm:request_prefill_time_seconds_count"] == 2
    assert abs(prefill["vllm:request_prefill_time_seconds_sum"] - 0.3) < 1e-12
    assert {s.name: s.value for s in f["vllm:request_prefill_kv_computed_tokens"]} == {
        "vllm:request_prefill_kv_computed_tokens_sum": 500, "vllm:request_prefill_kv_computed_tokens_count": 2,
    }
    assert f["vllm:cache_config_info"][0].labels["block_size"] == "32"
    meter.observe(text)
    cost = meter.cost()
    assert cost.block == 32 and cost.tpot_s == 0.02 and abs(cost.prefill_s - 0.3 / 500) < 1e-12
