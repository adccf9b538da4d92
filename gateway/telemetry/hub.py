"""Traces and metrics for one gateway: providers, exporters and what the routes read.

Exporters follow the standard OpenTelemetry environment, read once at the edge
(``OtelConfig.from_env``, called by ``create_app``):

- ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the per-signal ``..._TRACES_ENDPOINT`` /
  ``..._METRICS_ENDPOINT``) set: traces and metrics go out over OTLP http/protobuf.
  The exporters read the rest themselves (headers, timeout, compression,
  certificates), as do ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES`` and
  ``OTEL_TRACES_SAMPLER``; ``OTEL_METRIC_EXPORT_INTERVAL`` (ms, default 60000) sets
  how often metrics go out.
- ``OTEL_SDK_DISABLED=true`` or ``OTEL_{TRACES,METRICS}_EXPORTER=none``: that signal is not exported.

With no trace exporter and no tracer provider passed in, spans are not recorded
(the API's no-op tracer: a client's ``traceparent`` is still passed to the backend
unchanged). Metrics are always kept, for ``/metrics`` and ``/admin/stats``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from redis.asyncio import Redis
from starlette.datastructures import Headers

from gateway.telemetry import semconv as sc
from gateway.telemetry.accuracy import RankAccuracy
from gateway.telemetry.cluster import ClusterStats
from gateway.telemetry.metrics import Instruments
from gateway.telemetry.otlp import OtlpMetrics
from gateway.telemetry.prometheus import render
from gateway.telemetry.request_log import RequestLog
from gateway.telemetry.stats import WindowStats
from gateway.telemetry.tracing import Recorder, RequestTrace
from scheduler.backends.backend import BackendConfig
from scheduler.backends.registry import BackendRegistry
from scheduler.queue.depth import QueueDepth


def _on(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True, slots=True)
class OtelConfig:
    export_traces: bool = False
    export_metrics: bool = False
    service_name: str = "triage-gateway"
    metric_interval_s: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OtelConfig:
        if _on(env, "OTEL_SDK_DISABLED"):
            return cls()
        base = bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))

        def wanted(signal: str) -> bool:
            if env.get(f"OTEL_{signal}_EXPORTER", "otlp").strip().lower() == "none":
                return False
            return base or bool(env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))

        try:
            interval_s = float(env.get("OTEL_METRIC_EXPORT_INTERVAL") or 60_000) / 1000
        except ValueError:
            interval_s = 60.0
        service = env.get("OTEL_SERVICE_NAME") or "triage-gateway"
        return cls(wanted("TRACES"), wanted("METRICS"), service, max(1.0, interval_s))


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """What the gateway's settings say about its telemetry."""

    key_prefix: str  # of the Redis keys: queue depth, the published stats windows
    policy: str  # the queue policy's name, a span attribute
    instance_id: str = ""  # this replica: ``service.instance.id``, its stats window's name
    capture_content: bool = False  # record prompts and completions in spans
    request_log: bool = False  # one JSON line per request
    stats_publish_s: float = 2.0  # how often this replica's stats window goes to Redis
    depth_refresh_s: float = 5.0  # how often the queue depth is read for OTLP (a scrape reads it itself)


class Telemetry:
    """Built in ``create_app``'s lifespan; ``start``/``stop`` with the gateway."""

    def __init__(
        self,
        settings: TelemetrySettings,
        registry: BackendRegistry,
        redis: Redis,
        *,
        otel: OtelConfig | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        config = otel if otel is not None else OtelConfig()
        self.config = config
        self.policy = settings.policy
        resource = Resource.create(
            {"service.name": config.service_name, "service.instance.id": settings.instance_id},
            schema_url=sc.SCHEMA_URL,
        )
        self._owned_tracer: trace.TracerProvider | None = None
        if tracer_provider is None and config.export_traces:
            tracer_provider = self._owned_tracer = _otlp_tracer_provider(resource)
        provider = tracer_provider or trace.NoOpTracerProvider()
        self.tracer = provider.get_tracer(sc.INSTRUMENTATION_NAME, schema_url=sc.SCHEMA_URL)
        self.propagator = TraceContextTextMapPropagator()

        self.registry = registry
        prefix = settings.key_prefix
        self.depth = QueueDepth(redis, prefix, {b.config.pool for b in registry.backends.values()})
        self.accuracy = RankAccuracy()
        self.stats = WindowStats(classes=("short", "medium", "long"))
        self.cluster = ClusterStats(redis, prefix, settings.instance_id, self.stats, settings.stats_publish_s)
        self.instruments = Instruments(registry, self.depth, self.accuracy)
        self._depth_refresh_s = settings.depth_refresh_s
        self._otlp: OtlpMetrics | None = None
        if config.export_metrics:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            self._otlp = OtlpMetrics(
                self.instruments.registry, resource, OTLPMetricExporter(), config.metric_interval_s
            )
        self._addresses: dict[str, tuple[str, int]] = {}
        self.recorder = Recorder(
            self.tracer, self.propagator, self.instruments, self.stats, self.accuracy, self.address,
            policy=settings.policy, capture_content=settings.capture_content,
            request_log=RequestLog() if settings.request_log else None, tracing=tracer_provider is not None,
        )

    def begin(self, headers: Headers, operation: str, route: str) -> RequestTrace:
        """A request arrived: its trace starts, inside the client's if it sent one."""
        parent = self.propagator.extract(headers) if "traceparent" in headers else None
        return RequestTrace(self.recorder, operation, route, parent)

    def address(self, backend: BackendConfig) -> tuple[str, int]:
        """``server.address`` and ``server.port`` of a backend."""
        found = self._addresses.get(backend.name)
        if found is None:
            parts = urlsplit(backend.url)
            found = (parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
            self._addresses[backend.name] = found
        return found

    async def metrics_text(self) -> bytes:
        await self.depth.refresh()
        return render(self.instruments.registry)

    async def start(self) -> None:
        await self.cluster.start()
        if self._otlp is not None:  # scrapes refresh the depth themselves; OTLP needs a timer
            await self.depth.start(self._depth_refresh_s)
            await self._otlp.start()

    async def stop(self) -> None:
        await self.cluster.stop()
        await self.depth.stop()
        if self._otlp is not None:
            await self._otlp.stop()
        shutdown = getattr(self._owned_tracer, "shutdown", None)
        if shutdown is not None:
            shutdown()


def _otlp_tracer_provider(resource: Resource) -> trace.TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
