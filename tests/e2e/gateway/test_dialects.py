"""The gateway in front of the simulator speaking each engine's dialect.

Each dialect: the engine is detected, a non-streamed and a streamed request are served
with their usage counted by the gateway, and the adaptive limit reads the engine's own
gauges (a request running shows in it). Ollama: no ``/metrics``, its few parallel
slots as the starting limit, and ``name`` meaning ``name:latest``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from simulator.dialects import Dialect
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.e2e.observability.conftest import scrape, total
from tests.support import MODEL, eventually

WITH_METRICS = [Dialect.VLLM, Dialect.SGLANG, Dialect.TGI, Dialect.LLAMACPP]
def _param(d: Dialect) -> Any:
    return pytest.param(d, id=d.value)


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[Dialect, str]]:
    urls: dict[Dialect, str] = {}
    stack = []
    try:
        for d in Dialect:
            ctx = running_simulator(SimSettings(profile="fast", model=MODEL, max_num_seqs=64, dialect=d))
            urls[d] = ctx.__enter__()
            stack.append(ctx)
        yield urls
    finally:
        for ctx in reversed(stack):
            ctx.__exit__(None, None, None)


def _gateway(gateway_factory: Callable[..., str], url: str, **backend: Any) -> str:
    return gateway_factory([{"name": "sim", "url": url, **backend}], probe_interval_s=0.2)


async def _backend(base: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        resp = await client.get(f"{base}/admin/backends")
    assert resp.status_code == 200
    (backend,) = resp.json()["backends"]
    return backend  # type: ignore[no-any-return]


def _chat(n: int, stream: bool = False) -> dict[str, Any]:
    return {
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": n, "stream": stream,
        "ignore_eos": True,
    }


@pytest.mark.parametrize("dialect", [_param(d) for d in Dialect])
async def test_engine_is_detected(dialect: Dialect, sims: dict[Dialect, str], gateway_factory: Callable[..., str]) -> None:
    base = _gateway(gateway_factory, sims[dialect])
    backend = await _backend(base)
    assert backend["engine_profile"] == dialect.value
    assert backend["engine_source"] == ("metrics" if dialect in WITH_METRICS else "owned_by")
    if dialect is Dialect.OLLAMA:  # no max_concurrency configured: Ollama's few slots
        assert backend["limit"] == 4 and backend["ceiling"] == 4
        assert backend["engine"] == {"running": None, "waiting": None, "kv_cache_usage": None}
    else:
        assert backend["limit"] == 32  # the default, untouched


async def test_configured_engine_and_limit_win(sims: dict[Dialect, str], gateway_factory: Callable[..., str]) -> None:
    base = _gateway(gateway_factory, sims[Dialect.OLLAMA], engine="ollama", max_concurrency=2)
    backend = await _backend(base)
    assert (backend["engine_profile"], backend["engine_source"], backend["limit"]) == ("ollama", "configured", 2)


@pytest.mark.parametrize("dialect", [_param(d) for d in Dialect])
async def test_non_streamed_usage_is_counted(
    dialect: Dialect, sims: dict[Dialect, str], gateway_factory: Callable[..., str]
) -> None:
    base = _gateway(gateway_factory, sims[dialect])
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(f"{base}/v1/chat/completions", json=_chat(6))
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["completion_tokens"] == 6
    assert total(await scrape(base), "triage_output_tokens_total") == 6


@pytest.mark.parametrize("dialect", [_param(d) for d in Dialect])
async def test_streamed_usage_is_counted_and_stripped(
    dialect: Dialect, sims: dict[Dialect, str], gateway_factory: Callable[..., str]
) -> None:
    base = _gateway(gateway_factory, sims[dialect])
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(f"{base}/v1/chat/completions", json=_chat(5, stream=True))
    assert resp.status_code == 200
    body = resp.content
    assert b"[DONE]" in body

    async def counted() -> bool:  # a stream is counted once its last byte is out
        return total(await scrape(base), "triage_output_tokens_total") == 5

    await eventually(counted, within_s=5)
    # the usage chunk was asked for by the gateway, not by the client: it is not relayed
    # (TGI's usage rides on the last content chunk, which the client gets as it is)
    assert b'"choices":[]' not in body


@pytest.mark.parametrize("dialect", [_param(d) for d in WITH_METRICS])
async def test_adaptive_limit_reads_the_engine_gauges(
    dialect: Dialect, sims: dict[Dialect, str], gateway_factory: Callable[..., str]
) -> None:
    base = _gateway(gateway_factory, sims[dialect])
    assert (await _backend(base))["engine"]["running"] == 0  # named right: read, not None
    async with httpx.AsyncClient(timeout=30) as client:
        # a long generation, held open while the probe reads the engine's gauge
        async with client.stream("POST", f"{base}/v1/chat/completions", json=_chat(20_000, stream=True)) as resp:
            assert resp.status_code == 200

            async def running() -> bool:
                return (await _backend(base))["engine"]["running"] == 1

            await eventually(running)
    # leaving closes the stream: the engine aborts the request, and the gauge says so
    await eventually(lambda: _running_is(base, 0))


async def _running_is(base: str, n: int) -> bool:
    return (await _backend(base))["engine"]["running"] == n
