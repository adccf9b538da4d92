"""Injected faults, set at start-up or at run time through /sim/faults."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import openai
import pytest
from openai import AsyncOpenAI

from simulator.faults import FaultSettings
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.simulator.conftest import MODEL

BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "ignore_eos": True}


@pytest.fixture
async def sim() -> AsyncIterator[httpx.AsyncClient]:
    with running_simulator(SimSettings(profile="fast")) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield client


async def test_faults_are_off_by_default(sim: httpx.AsyncClient) -> None:
    assert (await sim.get("/sim/faults")).json() == FaultSettings().to_json()
    assert (await sim.post("/v1/chat/completions", json=BODY)).status_code == 200


async def test_refusal_with_status_and_retry_after(sim: httpx.AsyncClient) -> None:
    await sim.post("/sim/faults", json={"fail_rate": 1.0, "status_code": 429, "retry_after": 2})
    r = await sim.post("/v1/chat/completions", json=BODY)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "2"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert (await sim.get("/sim/stats")).json()["total_requests"] == 0  # refused before the engine

    base = str(sim.base_url).rstrip("/") + "/v1"
    async with AsyncOpenAI(base_url=base, api_key="unused", max_retries=0) as client:
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])

    await sim.post("/sim/faults", json={})
    assert (await sim.post("/v1/chat/completions", json=BODY)).status_code == 200


async def test_fail_rate_refuses_a_fraction_with_503(sim: httpx.AsyncClient) -> None:
    await sim.post("/sim/faults", json={"fail_rate": 0.5})
    statuses = [
        (await sim.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 1})).status_code
        for _ in range(40)
    ]
    assert set(statuses) == {200, 503}


async def test_down_fails_health_and_requests(sim: httpx.AsyncClient) -> None:
    await sim.post("/sim/faults", json={"down": True})
    assert (await sim.get("/health")).status_code == 503
    assert (await sim.get("/v1/models")).status_code == 503  # what a gateway probes
    assert (await sim.post("/v1/chat/completions", json=BODY)).status_code == 503
    await sim.post("/sim/faults", json={"down": False})
    assert (await sim.get("/health")).status_code == 200
    assert (await sim.get("/v1/models")).json()["data"][0]["id"] == MODEL


async def test_drop_after_tokens_cuts_a_stream(sim: httpx.AsyncClient) -> None:
    await sim.post("/sim/faults", json={"drop_after_tokens": 3})
    contents: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        async with sim.stream("POST", "/v1/chat/completions", json={**BODY, "stream": True}) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if '"content":"' in line and '"content":""' not in line:
                    contents.append(line.encode())
    assert len(contents) == 3
    stats = (await sim.get("/sim/stats")).json()
    assert stats["aborts"] == 1 and stats["running"] == 0


async def test_drop_after_tokens_cuts_a_non_streamed_response(sim: httpx.AsyncClient) -> None:
    await sim.post("/sim/faults", json={"drop_after_tokens": 3})
    with pytest.raises(httpx.RemoteProtocolError):
        await sim.post("/v1/chat/completions", json=BODY)
    # Shorter responses than the drop point are not affected.
    assert (await sim.post("/v1/chat/completions", json={**BODY, "max_tokens": 2})).status_code == 200


async def test_invalid_faults_are_rejected(sim: httpx.AsyncClient) -> None:
    assert (await sim.post("/sim/faults", json={"fail_rate": 2})).status_code == 400
    assert (await sim.post("/sim/faults", json={"nonsense": 1})).status_code == 400
    assert (await sim.get("/sim/faults")).json() == FaultSettings().to_json()


async def test_faults_from_settings() -> None:
    with running_simulator(SimSettings(profile="fast", faults=FaultSettings(down=True))) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.get("/health")).status_code == 503
