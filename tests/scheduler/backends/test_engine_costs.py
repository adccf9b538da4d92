"""The resume cost a backend's engine shows: rates between two scrapes of vLLM's counters,
folded into moving averages; the gateway's own measure and the defaults where it shows none."""

from __future__ import annotations

import pytest

from scheduler.backends.engine_costs import PREFILL_SHARE, VLLM_COSTS, WEIGHT, CostMeter, read
from scheduler.types import ResumeCost


def scrape(prefill_s: float, computed: float, prompt: float, cached: float, queries: float, hits: float,
           itl_sum: float, itl_count: float, block: int = 128, requests: float = 3.0) -> str:
    """vLLM 0.32's /metrics as it writes these series (two models' label sets for one)."""
    return f"""# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="{block}",cache_dtype="auto",enable_prefix_caching="True"}} 1.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{engine="0",model_name="tiny"}} {prompt}
vllm:prompt_tokens_cached_total{{engine="0",model_name="tiny"}} {cached}
vllm:prefix_cache_queries_total{{engine="0",model_name="tiny"}} {queries / 2}
vllm:prefix_cache_queries_total{{engine="0",model_name="other"}} {queries / 2}
vllm:prefix_cache_hits_total{{engine="0",model_name="tiny"}} {hits}
vllm:request_prefill_time_seconds_bucket{{engine="0",le="0.3",model_name="tiny"}} 3.0
vllm:request_prefill_time_seconds_sum{{engine="0",model_name="tiny"}} {prefill_s}
vllm:request_prefill_time_seconds_count{{engine="0",model_name="tiny"}} {requests}
vllm:request_prefill_kv_computed_tokens_sum{{engine="0",model_name="tiny"}} {computed}
vllm:inter_token_latency_seconds_sum{{engine="0",model_name="tiny"}} {itl_sum}
vllm:inter_token_latency_seconds_count{{engine="0",model_name="tiny"}} {itl_count}
vllm:num_requests_running{{engine="0",model_name="tiny"}} 2.0
"""


def test_read_sums_label_sets_and_finds_the_block_size() -> None:
    sums, block = read(scrape(1.5, 600, 1000, 400, 900, 300, 8.0, 1000), VLLM_COSTS)
    assert block == 128
    assert sums["vllm:prefix_cache_queries_total"] == 900
    assert sums["vllm:request_prefill_time_seconds_sum"] == 1.5
    assert "vllm:num_requests_running" not in sums


def test_the_first_interval_sets_the_rates_and_later_ones_blend_in() -> None:
    m = CostMeter(VLLM_COSTS)
    m.observe(scrape(1.0, 1000, 2000, 1000, 2000, 1000, 10.0, 1000))
    assert m.cost() == ResumeCost(block=128)  # one scrape: no interval yet, only the block size
    m.observe(scrape(1.2, 1400, 2600, 1200, 3000, 1400, 10.8, 1100))
    # 0.2 s for 400 tokens computed; 400 hits of 1000 queried; 0.8 s over 100 tokens
    assert m.cost() == ResumeCost(tpot_s=pytest.approx(0.008), prefill_s=pytest.approx(0.0005),
                                  hit=pytest.approx(0.4), block=128)
    m.observe(scrape(1.3, 1500, 2700, 1200, 3100, 1500, 11.8, 1200))
    # next interval: 0.001 s a token, all 100 queried tokens hit, 10 ms a token
    c = m.cost()
    assert c.prefill_s == pytest.approx((1 - WEIGHT) * 0.0005 + WEIGHT * 0.001)
    assert c.hit == pytest.approx((1 - WEIGHT) * 0.4 + WEIGHT * 1.0)
    assert c.tpot_s == pytest.approx((1 - WEIGHT) * 0.008 + WEIGHT * 0.01)


def test_without_a_computed_histogram_prompt_less_cached_is_what_was_computed() -> None:
    text = [scrape(1.0, 0, 2000, 1000, 0, 0, 0, 0), scrape(1.3, 0, 2600, 1300, 0, 0, 0, 0)]
    m = CostMeter(VLLM_COSTS)
    for t in text:
        m.observe("\n".join(line for line in t.splitlines() if "kv_computed" not in line))
    assert m.cost().prefill_s == pytest.approx(0.3 / 300)


def test_a_restarted_engine_is_not_read_as_negative_work() -> None:
    m = CostMeter(VLLM_COSTS)
    m.observe(scrape(100.0, 90_000, 99_000, 9000, 9000, 900, 50.0, 5000))
    m.observe(scrape(0.1, 100, 100, 0, 100, 0, 0.1, 10))  # counters started again
    assert m.cost() == ResumeCost(block=128)


def test_an_engine_that_shows_nothing_uses_the_gateways_measure_then_the_defaults() -> None:
    m = CostMeter(None)
    m.observe(scrape(1.0, 1000, 2000, 1000, 2000, 1000, 10.0, 1000))
    assert m.cost() == ResumeCost()
    assert m.cost(measured_tpot_s=0.02) == ResumeCost(tpot_s=0.02, prefill_s=0.02 * PREFILL_SHARE)


def test_a_prefills_overhead_is_told_apart_from_its_tokens() -> None:
    """Intervals of short and long prompts, each prefill 15 ms plus 0.12 ms a token (what
    vLLM's CPU build showed): the fit finds both, where time over tokens would not."""
    m = CostMeter(VLLM_COSTS)
    requests = tokens = seconds = 0.0
    m.observe(scrape(seconds, tokens, tokens, 0, 0, 0, 0, 0, requests=0))
    for n, prompt in [(3, 10), (3, 500), (4, 2000), (5, 40), (2, 900)]:
        requests, tokens = requests + n, tokens + n * prompt
        seconds += n * 0.015 + n * prompt * 0.00012
        m.observe(scrape(seconds, tokens, tokens, 0, 0, 0, 0, 0, requests=requests))
    c = m.cost()
    assert c.prefill_s == pytest.approx(0.00012, rel=1e-3) and c.prefill_base_s == pytest.approx(0.015, rel=1e-3)


def test_while_every_interval_has_the_same_mean_prompt_time_over_tokens_stands() -> None:
    m = CostMeter(VLLM_COSTS)
    requests = tokens = seconds = 0.0
    m.observe(scrape(seconds, tokens, tokens, 0, 0, 0, 0, 0, requests=0))
    for n in (2, 3, 4):
        requests, tokens, seconds = requests + n, tokens + n * 100, seconds + n * 0.027
        m.observe(scrape(seconds, tokens, tokens, 0, 0, 0, 0, 0, requests=requests))
    c = m.cost()
    assert c.prefill_s == pytest.approx(0.00027) and c.prefill_base_s == 0.0  # an upper bound
