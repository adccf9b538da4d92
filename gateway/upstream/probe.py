"""Asking a backend how it is, over HTTP: the registry's ``Probe``.

``/v1/models`` answers health and models at once; ``/metrics`` (Prometheus text, when
the engine serves it) shows the engine's own queue and KV cache.
"""

from __future__ import annotations

import httpx

from gateway.upstream.client import UpstreamError, upstream_errors
from scheduler.backends.backend import BackendConfig, MetricsNotServed, ModelList

PROBE_TIMEOUT_S = 5.0


def _headers(backend: BackendConfig) -> dict[str, str]:
    return {"authorization": f"Bearer {backend.api_key}"} if backend.api_key else {}


class HttpProbe:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def models(self, backend: BackendConfig) -> ModelList | None:
        try:
            with upstream_errors():
                resp = await self._client.get(
                    f"{backend.url}/v1/models", headers=_headers(backend), timeout=PROBE_TIMEOUT_S
                )
            if resp.status_code != 200:
                return None
            data = resp.json().get("data", [])
            cards = tuple(m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"])
            return ModelList(cards, resp.headers.get("server"))
        except (UpstreamError, ValueError, AttributeError, KeyError, TypeError):
            return None  # unreachable, or not an OpenAI model list

    async def metrics(self, backend: BackendConfig) -> str | None:
        try:
            with upstream_errors():
                resp = await self._client.get(
                    f"{backend.url}/metrics", headers=_headers(backend), timeout=PROBE_TIMEOUT_S
                )
        except UpstreamError:
            return None
        if resp.status_code != 200:
            raise MetricsNotServed(backend.name)
        return resp.text
