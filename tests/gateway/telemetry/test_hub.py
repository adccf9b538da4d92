"""``Telemetry``: exporters chosen from the standard ``OTEL_*`` environment, a request's
trace continuing the client's, backend addresses, ``/metrics`` text, and the replica's
stats window published while it runs."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis.asyncio import Redis
from starlette.datastructures import Headers

from gateway.telemetry.hub import OtelConfig, Telemetry, TelemetrySettings
from scheduler.backends.backend import BackendConfig
from scheduler.backends.registry import BackendRegistry
from scheduler.queue.keys import StatsKeys
from tests.support import eventually


@pytest.mark.parametrize(
    ("env", "traces", "metrics", "interval_s"),
    [
        ({}, False, False, 60.0),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True, True, 60.0),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True, False, 60.0),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_METRICS_EXPORTER": "none"}, True, False, 60.0),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "true"}, False, False, 60.0),
        ({"OTEL_METRIC_EXPORT_INTERVAL": "5000"}, False, False, 5.0),
        ({"OTEL_METRIC_EXPORT_INTERVAL": "10"}, False, False, 1.0),  # at least a second
        ({"OTEL_METRIC_EXPORT_INTERVAL": "soon"}, False, False, 60.0),
    ],
)
def test_exporters_follow_the_standard_environment(env: dict, traces: bool, metrics: bool, interval_s: float) -> None:
    config = OtelConfig.from_env(env)
    assert (config.export_traces, config.export_metrics, config.metric_interval_s) == (traces, metrics, interval_s)


def test_the_service_name_comes_from_the_environment() -> None:
    assert OtelConfig.from_env({"OTEL_SERVICE_NAME": "edge"}).service_name == "edge"
    assert OtelConfig.from_env({}).service_name == "triage-gateway"


def telemetry(redis: Redis, prefix: str, provider: TracerProvider | None = None) -> Telemetry:
    configs = [
        BackendConfig("plain", "http://10.1.2.3", "p", 4, ("m",)),
        BackendConfig("tls", "https://api.example.com/base", "p", 4, ("m",)),
        BackendConfig("port", "http://[::1]:8001", "p", 4, ("m",)),
    ]
    registry = BackendRegistry(configs, probe=None, dispatcher=None, probe_interval_s=60)  # type: ignore[arg-type]
    settings = TelemetrySettings(prefix, "short_first", instance_id="r1", stats_publish_s=0.05)
    return Telemetry(settings, registry, redis, tracer_provider=provider)


def test_backend_addresses_with_their_default_ports(redis: Redis, prefix: str) -> None:
    t = telemetry(redis, prefix)
    assert [t.address(b.config) for b in t.registry.backends.values()] == [
        ("10.1.2.3", 80), ("api.example.com", 443), ("::1", 8001),
    ]


def test_a_request_continues_the_clients_trace(redis: Redis, prefix: str) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    t = telemetry(redis, prefix, provider)
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    t.begin(Headers({"traceparent": parent}), "chat", "/v1/chat/completions").end(200)
    t.begin(Headers({}), "chat", "/v1/chat/completions").end(200)
    continued, fresh = spans.get_finished_spans()
    assert format(continued.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert format(continued.parent.span_id, "016x") == "b7ad6b7169203331"
    assert fresh.parent is None


def test_without_a_provider_or_an_exporter_spans_are_not_recorded(redis: Redis, prefix: str) -> None:
    trace = telemetry(redis, prefix).begin(Headers({}), "chat", "/v1/chat/completions")
    assert not trace.span.is_recording()


async def test_metrics_text_and_the_published_window(redis: Redis, prefix: str) -> None:
    t = telemetry(redis, prefix)
    text = (await t.metrics_text()).decode()
    assert '# TYPE triage_queue_depth gauge' in text and 'triage_queue_depth{triage_pool="p"} 0' in text
    await t.start()
    try:
        await eventually(lambda: redis.exists(StatsKeys(prefix).replica("r1")))  # published while running
    finally:
        await t.stop()
