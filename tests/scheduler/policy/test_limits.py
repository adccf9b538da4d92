"""The adaptive concurrency controller, signal by signal, and the engine-metrics reader."""

from __future__ import annotations

from scheduler.backends import engine_metrics
from scheduler.policy.limits import AdaptiveLimit, EngineLoad, LimitParams


def limiter(initial: int = 32, **kw: object) -> AdaptiveLimit:
    return AdaptiveLimit(LimitParams(initial=initial, floor=2, ceiling=64, **kw))  # type: ignore[arg-type]


def test_overload_cuts_multiplicatively() -> None:
    lim = limiter()
    lim.on_overload()
    assert lim.tick()
    assert lim.limit == 22  # floor(32 * 0.7)
    assert lim.last_reason == "backend answered 429/503"


def test_engine_queue_brings_the_limit_to_what_the_engine_runs() -> None:
    lim = limiter(initial=64)
    lim.on_engine(EngineLoad(running=24, waiting=30, kv_usage=0.5))
    lim.tick()
    assert lim.limit == 25


def test_small_engine_queue_is_tolerated() -> None:
    lim = limiter(initial=32)
    lim.on_engine(EngineLoad(running=32, waiting=1, kv_usage=0.5))
    lim.on_in_flight(32)
    assert not lim.tick()  # no decrease, and no probe upward while the engine queues
    assert lim.limit == 32


def test_latency_above_target_while_busy_decreases() -> None:
    lim = limiter(ttft_target_s=0.5)
    lim.on_in_flight(30)
    for _ in range(10):
        lim.on_success(2.0, 0.02)
    lim.tick()
    assert lim.limit == 28  # floor(32 * 0.9)


def test_latency_does_not_cut_the_limit_of_an_engine_seen_not_queueing() -> None:
    """Its queue is seen and empty: slower steps are a fuller batch's, not a queue inside."""
    lim = limiter(ttft_target_s=0.5, tpot_target_s=0.05)
    lim.on_engine(EngineLoad(running=30, waiting=0, kv_usage=0.4))
    lim.on_in_flight(30)
    for _ in range(10):
        lim.on_success(2.0, 0.2)
    assert not lim.tick() and lim.limit == 32


def test_latency_cuts_where_configured_to_even_with_the_queue_seen() -> None:
    lim = limiter(ttft_target_s=0.5, latency_always=True)
    lim.on_engine(EngineLoad(running=30, waiting=0, kv_usage=0.4))
    lim.on_in_flight(30)
    for _ in range(10):
        lim.on_success(2.0, 0.02)
    assert lim.tick() and lim.limit == 28 and lim.last_reason == "TTFT above target"


def test_latency_is_not_blamed_on_an_idle_backend() -> None:
    lim = limiter(ttft_target_s=0.5)
    lim.on_in_flight(3)
    lim.on_success(2.0, 0.02)  # slow because of a long prompt, not load
    assert not lim.tick()


def test_full_use_with_good_latency_probes_upward_to_the_ceiling() -> None:
    lim = limiter(initial=63)
    for _ in range(3):
        lim.on_in_flight(lim.limit)
        lim.on_success(0.05, 0.01)
        lim.on_engine(EngineLoad(running=lim.limit, waiting=0))
        lim.tick()
    assert lim.limit == 64


def test_floor_holds_and_static_limits_never_move() -> None:
    lim = limiter(initial=3)
    for _ in range(5):
        lim.on_overload()
        lim.tick()
    assert lim.limit == 2
    static = AdaptiveLimit(LimitParams(initial=10, adaptive=False))
    static.on_overload()
    assert not static.tick() and static.limit == 10


VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 7.0
vllm:num_requests_running{model_name="b"} 3.0
vllm:num_requests_waiting{model_name="a"} 2.0
vllm:kv_cache_usage_perc{model_name="a"} 0.25
vllm:kv_cache_usage_perc{model_name="b"} 0.5
vllm:num_requests_running_extra 99
"""


def test_reads_vllm_metrics() -> None:
    load = engine_metrics.parse(VLLM)
    assert (load.running, load.waiting, load.kv_usage) == (10.0, 2.0, 0.5)


def test_reads_sglang_and_tgi_metrics_and_tolerates_junk() -> None:
    load = engine_metrics.parse("sglang:num_running_reqs 4\nsglang:num_queue_reqs 1\nsglang:token_usage 0.9\nbad\n")
    assert (load.running, load.waiting, load.kv_usage) == (4.0, 1.0, 0.9)
    load = engine_metrics.parse("tgi_queue_size 5\ntgi_batch_current_size 8\n")
    assert (load.running, load.waiting, load.kv_usage) == (8.0, 5.0, None)
    assert engine_metrics.parse("") == EngineLoad()
