"""Fault tests share a slow simulator and a streaming client that counts what arrives
(the gateway fixtures come from ``tests/e2e/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL


@pytest.fixture
def sim() -> Iterator[str]:
    """A simulator three times slower than `fast`: long streams stay open for seconds."""
    settings = SimSettings(profile="fast", model=MODEL, max_num_seqs=16, max_model_len=65_536, time_scale=3.0)
    with running_simulator(settings) as url:
        yield url


def chat(tokens: int, stream: bool = True) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "max_tokens": tokens,
            "ignore_eos": True, "stream": stream}


async def stream_tokens(http: httpx.AsyncClient, url: str, tokens: int) -> int:
    """Stream one request to its end; the number of content chunks received."""
    count = 0
    async with http.stream("POST", f"{url}/v1/chat/completions", json=chat(tokens)) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                count += 1
    return count
