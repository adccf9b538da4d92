"""OTLP export to a stand-in collector on loopback: configured only by the standard environment."""

from __future__ import annotations

import os

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.app import create_app
from gateway.settings import Settings
from gateway.telemetry.hub import OtelConfig
from tests.e2e.observability.conftest import MODEL, stream_chat
from tests.support import running_app


def test_config_follows_the_standard_environment() -> None:
    assert OtelConfig.from_env({}) == OtelConfig()
    on = OtelConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRIC_EXPORT_INTERVAL": "5000"})
    assert on.export_traces and on.export_metrics and on.metric_interval_s == 5
    only_traces = OtelConfig.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert only_traces.export_traces and not only_traces.export_metrics
    assert not OtelConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "true"}).export_traces
    assert not OtelConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_METRICS_EXPORTER": "none"}).export_metrics
    assert OtelConfig.from_env({"OTEL_SERVICE_NAME": "gw-7"}).service_name == "gw-7"


async def test_traces_and_metrics_reach_an_otlp_endpoint(
    redis_url: str, prefix: str, sim_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    received: dict[str, list[bytes]] = {}

    async def collect(request: Request) -> Response:
        assert request.headers["content-type"] == "application/x-protobuf"
        received.setdefault(request.url.path, []).append(await request.body())
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/{signal}", collect, methods=["POST"])])
    with running_app(collector) as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        settings = Settings.model_validate({
            "redis_url": redis_url, "key_prefix": prefix,
            "backends": [{"name": "sim", "url": sim_url, "models": [MODEL]}],
        })
        with running_app(create_app(settings, otel=OtelConfig.from_env(os.environ))) as base:
            async with httpx.AsyncClient() as client:
                await stream_chat(client, base, 4)
        # stopping the gateway flushes both signals

    traces = ExportTraceServiceRequest()
    traces.ParseFromString(received["/v1/traces"][-1])
    names = {s.name for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans}
    assert {"POST /v1/chat/completions", "triage.queue", f"chat {MODEL}"} <= names
    service = {a.key: a.value.string_value for a in traces.resource_spans[0].resource.attributes}["service.name"]
    assert service == "triage-gateway"

    metrics = ExportMetricsServiceRequest()
    metrics.ParseFromString(received["/v1/metrics"][-1])
    exported = {
        m.name: m for rm in metrics.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert {"gen_ai.server.time_to_first_token", "gen_ai.client.token.usage", "triage.queue.depth"} <= set(exported)
    ttft = exported["gen_ai.server.time_to_first_token"].histogram.data_points[0]
    assert ttft.count == 1 and list(ttft.explicit_bounds)[:3] == [0.001, 0.005, 0.01]
    attrs = {a.key: a.value.string_value for a in ttft.attributes}
    assert attrs["gen_ai.request.model"] == MODEL and attrs["gen_ai.provider.name"] == "openai"
    tokens = exported["triage.output_tokens"].sum
    assert tokens.is_monotonic and tokens.data_points[0].as_int == 4
