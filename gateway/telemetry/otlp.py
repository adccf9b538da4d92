"""OTLP export of ``instruments.Registry``: cumulative points, every ``interval_s``.

A snapshot is built on the event loop (where the instruments are written, so it is
consistent without a lock) as the SDK's ``MetricsData`` and handed to the standard
OTLP/HTTP exporter in a worker thread; the exporter reads its endpoint, headers,
timeout and compression from the ``OTEL_EXPORTER_OTLP_*`` environment itself.
"""

from __future__ import annotations

import asyncio
import logging
import time

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from gateway.telemetry import semconv as sc
from gateway.telemetry.instruments import Counter, Instrument, Key, Registry
from gateway.telemetry.instruments import Gauge as GaugeInstrument
from gateway.telemetry.instruments import Histogram as HistogramInstrument
from scheduler import tasks

log = logging.getLogger("triage.telemetry")
_CUMULATIVE = AggregationTemporality.CUMULATIVE


def _attrs(labels: tuple[str, ...], key: Key) -> dict[str, str]:
    return {k: v for k, v in zip(labels, key, strict=False) if v != ""}


def _metric(inst: Instrument, start: int, now: int) -> Metric | None:
    data: Sum | Histogram | Gauge
    if isinstance(inst, Counter):
        points = [NumberDataPoint(_attrs(inst.labels, k), start, now, v) for k, v in inst.series.items()]
        data = Sum(points, _CUMULATIVE, is_monotonic=True)
    elif isinstance(inst, HistogramInstrument):
        hist_points = [
            HistogramDataPoint(
                _attrs(inst.labels, k), start, now, s.count, s.sum, list(s.counts), list(inst.bounds), s.min, s.max
            )
            for k, s in inst.series.items()
        ]
        data = Histogram(hist_points, _CUMULATIVE)
        points = hist_points  # type: ignore[assignment]
    elif isinstance(inst, GaugeInstrument):
        points = [NumberDataPoint(_attrs(inst.labels, k), now, now, v) for k, v in inst.observe()]
        data = Gauge(points)
    else:
        return None
    if not points:
        return None
    return Metric(inst.name, inst.description, inst.unit, data)


def snapshot(registry: Registry, resource: Resource) -> MetricsData:
    now = time.time_ns()
    metrics = [m for inst in registry.instruments if (m := _metric(inst, registry.start_ns, now)) is not None]
    scope = InstrumentationScope(sc.INSTRUMENTATION_NAME, None, sc.SCHEMA_URL)
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, sc.SCHEMA_URL)], sc.SCHEMA_URL)])


class OtlpMetrics:
    def __init__(self, registry: Registry, resource: Resource, exporter: MetricExporter, interval_s: float) -> None:
        self._registry = registry
        self._resource = resource
        self._exporter = exporter
        self._exports = tasks.Periodic(interval_s, self.export, "OTLP metrics export", log=log)

    async def start(self) -> None:
        self._exports.start()

    async def stop(self) -> None:
        if self._exports.running:
            await self._exports.stop()
            await self.export()  # the last interval's numbers
        await asyncio.to_thread(self._exporter.shutdown)

    async def export(self) -> None:
        data = snapshot(self._registry, self._resource)
        try:
            await asyncio.to_thread(self._exporter.export, data)
        except Exception as exc:  # noqa: BLE001 - an unreachable collector must not stop the gateway
            log.warning("OTLP metrics export failed: %s", exc)
