"""OTLP export of the gateway's instruments, through the real OTLP/HTTP exporter to a
collector double on loopback that decodes what it receives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum
from opentelemetry.sdk.resources import Resource
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.telemetry.instruments import Registry
from gateway.telemetry.otlp import OtlpMetrics, snapshot
from tests.support import eventually, running_app


def registry() -> Registry:
    r = Registry()
    requests = r.counter("triage.requests", "{request}", "Requests.", ("model", "outcome"))
    requests.add(2, ("m", "ok"))
    requests.add(1, ("m", ""))  # an empty label value is left out
    wait = r.histogram("triage.queue.wait", "s", "Waits.", ("pool",), (0.1, 1.0))
    wait.record(0.05, ("p",))
    wait.record(5.0, ("p",))
    r.gauge("triage.backend.limit", "{request}", "Limit.", ("backend",), lambda: [(("b",), 8.0)])
    r.counter("triage.unused", "{request}", "Never added to.")
    return r


def test_a_snapshot_holds_cumulative_points_of_what_was_recorded() -> None:
    data = snapshot(registry(), Resource.create({"service.name": "t"}))
    (scope,) = data.resource_metrics[0].scope_metrics
    metrics = {m.name: m for m in scope.metrics}
    assert set(metrics) == {"triage.requests", "triage.queue.wait", "triage.backend.limit"}  # nothing empty

    counter = metrics["triage.requests"].data
    assert isinstance(counter, Sum) and counter.is_monotonic
    assert {tuple(sorted(p.attributes.items())): p.value for p in counter.data_points} == {
        (("model", "m"), ("outcome", "ok")): 2, (("model", "m"),): 1,
    }
    hist = metrics["triage.queue.wait"].data
    assert isinstance(hist, Histogram)
    (point,) = hist.data_points
    assert (point.count, point.bucket_counts, point.explicit_bounds, point.min, point.max) == (2, [1, 0, 1], [0.1, 1.0], 0.05, 5.0)
    gauge = metrics["triage.backend.limit"].data
    assert isinstance(gauge, Gauge) and [p.value for p in gauge.data_points] == [8.0]


@pytest.fixture
def collector() -> Iterator[tuple[str, list[ExportMetricsServiceRequest]]]:
    received: list[ExportMetricsServiceRequest] = []

    async def metrics(request: Request) -> Response:
        message = ExportMetricsServiceRequest()
        message.ParseFromString(await request.body())
        received.append(message)
        return Response(b"", 200, media_type="application/x-protobuf")

    with running_app(Starlette(routes=[Route("/v1/metrics", metrics, methods=["POST"])])) as url:
        yield url, received


async def test_the_exporter_sends_them_and_the_last_interval_goes_out_at_stop(
    collector: tuple[str, list[ExportMetricsServiceRequest]],
) -> None:
    url, received = collector
    r = registry()
    otlp = OtlpMetrics(r, Resource.create({"service.name": "t"}), OTLPMetricExporter(endpoint=f"{url}/v1/metrics"), 3600)
    await otlp.start()
    await otlp.stop()  # the interval never came: stop sends what there is

    (request,) = received
    names = {m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert names == {"triage.requests", "triage.queue.wait", "triage.backend.limit"}


async def test_an_unreachable_collector_does_not_stop_the_gateway(unreachable: str) -> None:
    otlp = OtlpMetrics(registry(), Resource.create({}), OTLPMetricExporter(endpoint=unreachable, timeout=2), 3600)
    await otlp.export()  # logged, not raised


@pytest.fixture
def unreachable() -> str:
    from gateway.server.embedded import free_port

    return f"http://127.0.0.1:{free_port()}/v1/metrics"


async def test_export_on_a_schedule(collector: tuple[str, list[ExportMetricsServiceRequest]]) -> None:
    url, received = collector
    otlp = OtlpMetrics(registry(), Resource.create({}), OTLPMetricExporter(endpoint=f"{url}/v1/metrics"), 1.0)
    await otlp.start()
    try:
        await eventually(lambda: len(received) >= 1)
    finally:
        await otlp.stop()
