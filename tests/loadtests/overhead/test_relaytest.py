"""The relay's client side (``run_relay``) against a simulator of its own: streams kept
running at the concurrency asked, their chunks counted after the warm-up, their gaps
summarised, and every stream closed at the end."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from loadtests.overhead.relaytest import RelaySpec, run_relay
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL, eventually


@pytest.fixture(scope="module")
def relay_sim() -> Iterator[str]:
    with running_simulator(SimSettings(profile="fast", model=MODEL, max_num_seqs=16)) as url:
        yield url


def _spec(url: str, max_tokens: int, path: str = "/v1/chat/completions", model: str = MODEL) -> RelaySpec:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    body = orjson.dumps({"model": model, "stream": True, "max_tokens": max_tokens,
                         "messages": [{"role": "user", "content": "relay"}]})
    return RelaySpec(parts.hostname, parts.port, path, body, concurrency=3, duration_s=0.4, warmup_s=0.2)


async def _sim_idle(url: str) -> bool:
    async with httpx.AsyncClient(timeout=10) as http:
        stats = (await http.get(f"{url}/sim/stats")).json()
    return stats["running"] == 0 and stats["waiting"] == 0


async def test_streams_are_counted_after_the_warm_up_and_closed_at_the_end(relay_sim: str) -> None:
    out = await run_relay(_spec(relay_sim, max_tokens=40))  # short streams: each is re-sent as it ends
    assert out["concurrency"] == 3 and out["errors"] == 0
    assert out["chunks_per_s"] > 0
    assert out["itl_ms"]["n"] > 0 and out["ttft_ms"]["n"] > 0
    assert out["ttft_ms"]["p50"] <= out["ttft_ms"]["max"]
    assert set(out["itl_ms"]) == {"p50", "p90", "p99", "mean", "max", "n"}
    assert "generator_cpu_pct" in out
    await eventually(lambda: _sim_idle(relay_sim))  # the streams still running were closed


async def test_refused_streams_carry_no_chunks_and_no_latency_samples(relay_sim: str) -> None:
    out = await run_relay(_spec(relay_sim, max_tokens=5, model="no-such-model"))  # the simulator answers 404
    assert out["chunks_per_s"] == 0
    assert out["itl_ms"]["n"] == 0 and out["ttft_ms"]["n"] == 0
    assert out["errors"] == 3  # every stream refused in the warm-up is counted, none replaced
