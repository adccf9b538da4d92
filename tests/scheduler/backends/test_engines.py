"""Engine profiles: detection, the gauges each engine's names give, the priority direction."""

from __future__ import annotations

import pytest

from scheduler.backends import engine_metrics, engines
from scheduler.backends.engines import Engine
from scheduler.policy.limits import EngineLoad

SGLANG_COLON = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m"} 3.0
sglang:num_queue_reqs{engine_type="unified",model_name="m"} 2.0
sglang:token_usage{engine_type="unified",model_name="m"} 0.5
"""
SGLANG_UNDERSCORE = SGLANG_COLON.replace("sglang:", "sglang_")
LLAMACPP = """# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 5
llamacpp:kv_cache_usage_ratio 0.25
"""
TGI = "tgi_queue_size 4\ntgi_batch_current_size 8\ntgi_request_count 100\n"
VLLM = 'vllm:num_requests_running{model_name="m"} 1\nvllm:num_requests_waiting{model_name="m"} 0\n'


@pytest.mark.parametrize(("text", "engine", "load"), [
    (SGLANG_COLON, Engine.SGLANG, EngineLoad(3, 2, 0.5)),
    (SGLANG_UNDERSCORE, Engine.SGLANG, EngineLoad(3, 2, 0.5)),
    (LLAMACPP, Engine.LLAMACPP, EngineLoad(2, 5, 0.25)),
    (TGI, Engine.TGI, EngineLoad(8, 4, None)),
    (VLLM, Engine.VLLM, EngineLoad(1, 0, None)),
])
def test_metrics_name_the_engine_and_its_profile_reads_them(text: str, engine: Engine, load: EngineLoad) -> None:
    assert engines.detect(text) == (engine, "metrics")
    assert engine_metrics.parse(text, engines.profile(engine)) == load
    assert engine_metrics.parse(text) == load  # the neutral profile reads every engine's names


def test_a_profile_reads_only_its_own_engines_names() -> None:
    assert engine_metrics.parse(LLAMACPP, engines.VLLM) == EngineLoad()
    assert engine_metrics.parse(TGI, engines.SGLANG) == EngineLoad()


def test_a_type_line_alone_names_the_engine() -> None:
    assert engines.detect("# TYPE llamacpp:requests_processing gauge\n") == (Engine.LLAMACPP, "metrics")


@pytest.mark.parametrize(("metrics", "owned_by", "server", "want"), [
    (None, ["vllm"], "uvicorn", (Engine.VLLM, "owned_by")),
    (None, ["sglang"], "uvicorn", (Engine.SGLANG, "owned_by")),
    (None, ["library"], None, (Engine.OLLAMA, "owned_by")),
    (None, ["llamacpp"], "llama.cpp", (Engine.LLAMACPP, "owned_by")),
    (None, ["someone"], "llama.cpp", (Engine.LLAMACPP, "server header")),
    (TGI, ["vllm"], None, (Engine.TGI, "metrics")),  # metric names are trusted first
    (None, ["meta-llama/Llama-3.1-8B"], "uvicorn", None),  # uvicorn: vLLM or SGLang, can't tell
    ("process_cpu_seconds_total 3\n", [], None, None),
])
def test_detection_order(
    metrics: str | None, owned_by: list[str], server: str | None, want: tuple[Engine, str] | None
) -> None:
    assert engines.detect(metrics, owned_by, server) == want


@pytest.mark.parametrize(("profile", "order", "want"), [
    (engines.VLLM, "auto", 1500),  # lower runs first
    (engines.SGLANG, "auto", -1500),  # higher runs first, by default
    (engines.SGLANG, "lower_first", 1500),  # --schedule-low-priority-values-first
    (engines.VLLM, "higher_first", -1500),
    (engines.TGI, "auto", None),  # no priority field: none sent
    (engines.OLLAMA, "auto", None),
    (engines.NEUTRAL, "auto", 1500),  # unknown: as configured, lower first
])
def test_priority_direction(profile: engines.EngineProfile, order: str, want: int | None) -> None:
    assert engines.priority_value(profile, order, 1500) == want


def test_the_gateway_order_survives_the_flip() -> None:
    urgent, later = 100, 5000  # gateway: lower first
    s = engines.SGLANG
    assert engines.priority_value(s, "auto", urgent) > engines.priority_value(s, "auto", later)  # type: ignore[operator]


def test_only_ollama_lowers_the_starting_limit() -> None:
    assert {e: p.max_concurrency for e, p in engines.PROFILES.items() if p.max_concurrency} == {Engine.OLLAMA: 4}
