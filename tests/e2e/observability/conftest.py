"""Observability fixtures: real gateways with an in-memory span exporter, in front of
the session's simulator."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.settings import Settings
from gateway.telemetry.hub import OtelConfig
from tests.support import MODEL, running_app


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def observed(redis_url: str, prefix: str, sim_url: str, spans: InMemorySpanExporter) -> Iterator[Callable[..., str]]:
    """Start a gateway whose spans land in ``spans``; no OTLP export whatever the environment says."""
    with ExitStack() as stack:

        def start(backends: list[dict[str, Any]] | None = None, traced: bool = True, **overrides: Any) -> str:
            backends = backends or [{"name": "sim", "url": sim_url, "models": [MODEL], "max_concurrency": 16}]
            values: dict[str, Any] = {"redis_url": redis_url, "key_prefix": prefix, "backends": backends}
            values.update(overrides)
            provider = None
            if traced:
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(spans))
            app = create_app(Settings.model_validate(values), tracer_provider=provider, otel=OtelConfig())
            return stack.enter_context(running_app(app))

        yield start


async def scrape(base: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``/metrics`` as ``{sample name: [(labels, value), ...]}``."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{base}/metrics")).text
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


async def get_json(base: str, path: str) -> Any:
    async with httpx.AsyncClient() as client:
        resp = await client.get(f"{base}{path}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for lab, v in samples.get(name, []) if all(lab.get(k) == want for k, want in labels.items()))


async def stream_chat(
    client: httpx.AsyncClient, base: str, max_tokens: int, prompt: str = "hi",
    headers: dict[str, str] | None = None, **extra: Any,
) -> dict[str, Any]:
    """One streamed chat request; returns the client-measured TTFT and the usage."""
    body = {
        "model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
        "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True, **extra,
    }
    sent = time.monotonic()
    ttft = None
    usage = None
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = orjson.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            if ttft is None and any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                ttft = time.monotonic() - sent
    return {"ttft_s": ttft, "usage": usage}
