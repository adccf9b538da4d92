"""The gateway's instruments as ``/metrics`` shows them: observed gauges read the backend
registry and the queue depth when collected; every pool reads 0 rather than no data."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from gateway.telemetry.accuracy import RankAccuracy
from gateway.telemetry.metrics import GENAI_LABELS, Instruments
from gateway.telemetry.prometheus import render
from scheduler.backends.backend import BackendConfig
from scheduler.backends.breaker import Health
from scheduler.backends.registry import BackendRegistry
from scheduler.queue.depth import QueueDepth


def samples(text: bytes, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text.decode()) for s in f.samples if s.name == name
    }


@pytest.fixture
async def parts(redis: Redis, prefix: str) -> tuple[Instruments, QueueDepth, RankAccuracy]:
    configs = [
        BackendConfig("a", "http://127.0.0.1:1", "p1", 4, ("m",)),
        BackendConfig("b", "http://127.0.0.1:2", "p2", 16, ("n",)),
    ]
    registry = BackendRegistry(configs, probe=None, dispatcher=None, probe_interval_s=60)  # type: ignore[arg-type]
    depth = QueueDepth(redis, prefix, {"p1", "p2"})
    accuracy = RankAccuracy()
    return Instruments(registry, depth, accuracy), depth, accuracy


async def test_backend_gauges_read_the_registry(parts: tuple[Instruments, QueueDepth, RankAccuracy]) -> None:
    instruments, _, _ = parts
    text = render(instruments.registry)
    health = samples(text, "triage_backend_health")
    assert len(health) == 2 * len(Health)
    for backend in ("a", "b"):  # one state is 1, the others 0: not probed yet, it is probing
        states = {dict(k)["triage_state"]: v for k, v in health.items() if ("triage_backend", backend) in k}
        assert states == {"up": 0, "down": 0, "probing": 1}
    assert samples(text, "triage_backend_limit") == {  # a probing backend gets a trickle
        (("triage_backend", "a"), ("triage_pool", "p1")): 1, (("triage_backend", "b"), ("triage_pool", "p2")): 1,
    }
    assert samples(text, "triage_backend_long_cap") == {
        (("triage_backend", "a"), ("triage_pool", "p1")): 1, (("triage_backend", "b"), ("triage_pool", "p2")): 1,
    }


async def test_an_empty_queue_reads_zero_and_a_queued_one_its_depth(
    parts: tuple[Instruments, QueueDepth, RankAccuracy],
) -> None:
    instruments, depth, _ = parts
    await depth.refresh()  # the embedded Valkey: nothing queued under this prefix
    assert samples(render(instruments.registry), "triage_queue_depth") == {
        (("triage_pool", "p1"),): 0, (("triage_pool", "p2"),): 0,
    }
    depth.snapshot = {("p1", "short", "interactive"): 3}
    assert samples(render(instruments.registry), "triage_queue_depth") == {
        (("triage_class", "short"), ("triage_pool", "p1"), ("triage_tier", "interactive")): 3,
        (("triage_pool", "p2"),): 0,
    }


async def test_kendall_tau_appears_once_there_is_a_ranking(parts: tuple[Instruments, QueueDepth, RankAccuracy]) -> None:
    instruments, _, accuracy = parts
    assert samples(render(instruments.registry), "triage_predictor_kendall_tau") == {}
    for predicted, actual in ((1.0, 10), (2.0, 20), (3.0, 30)):
        accuracy.observe(predicted, actual)
    assert samples(render(instruments.registry), "triage_predictor_kendall_tau") == {(): 1.0}


async def test_request_instruments_take_label_values_in_declared_order(
    parts: tuple[Instruments, QueueDepth, RankAccuracy],
) -> None:
    instruments, _, _ = parts
    key = ("chat", "openai", "m", "short", "a")
    assert len(key) == len(GENAI_LABELS)
    instruments.requests.add(1, (*key, "ok"))
    instruments.ttft.record(0.03, key)
    text = render(instruments.registry)
    (labels, value), = samples(text, "triage_requests_total").items()
    assert dict(labels)["gen_ai_request_model"] == "m" and dict(labels)["triage_outcome"] == "ok" and value == 1
    assert samples(text, "gen_ai_server_time_to_first_token_seconds_count") == {
        tuple(sorted(zip((label.replace(".", "_") for label in GENAI_LABELS), key, strict=True))): 1,
    }
