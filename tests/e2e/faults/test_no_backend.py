"""A model whose every backend is down gets a prompt 503 no_backend with Retry-After,
not a wait of queue_timeout_s; with a grace, at most the grace (a probing breaker may
close first). So do requests already queued when the last backend goes down."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL, busy_is, eventually, queue_is

CHAT = "/v1/chat/completions"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("grace_s", [0.0, 1.0])
@pytest.mark.parametrize("stream", [False, True])
async def test_every_backend_down_is_a_prompt_503(
    gateway_factory: Callable[..., str], grace_s: float, stream: bool
) -> None:
    dead = {"name": "dead", "url": f"http://127.0.0.1:{closed_port()}", "models": [MODEL], "adaptive": False}
    gw = gateway_factory([dead], no_backend_grace_s=grace_s)  # queue_timeout_s stays 300
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "stream": stream}
    async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
        resp = await http.post(CHAT, json=body)
        if resp.status_code == 200:  # a stream that waited out the grace past its headers (1 s)
            assert stream and grace_s >= 1
            error = orjson.loads(resp.text.strip().splitlines()[-1].removeprefix("data: "))["error"]
        else:
            assert resp.status_code == 503, resp.text
            error = resp.json()["error"]
            assert int(resp.headers["retry-after"]) >= 1
        assert error["code"] == "no_backend" and set(error) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("stream", [False, True])
async def test_queued_requests_end_when_their_last_backend_goes_down(
    gateway_factory: Callable[..., str], redis: Redis, prefix: str, stream: bool
) -> None:
    """A request queued while its backend was up (behind a long one holding the only slot)
    gets the same prompt 503 once the backend is down, not a wait of queue_timeout_s; its
    ticket leaves the queue."""
    keys = PoolKeys(prefix, "default")
    with running_simulator(SimSettings(profile="llama-8b-h100")) as sim:
        backend = {"name": "sim", "url": sim, "models": [MODEL], "max_concurrency": 1, "adaptive": False}
        gw = gateway_factory([backend], probe_interval_s=0.1)  # queue_timeout_s stays 300
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            long_body = {"model": MODEL, "messages": [{"role": "user", "content": "long"}], "max_tokens": 5000,
                         "ignore_eos": True, "stream": True}
            holder = asyncio.create_task(http.post(CHAT, json=long_body))
            await eventually(lambda: busy_is(redis, keys, 1))
            body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "stream": stream}
            queued = asyncio.create_task(http.post(CHAT, json=body))
            await eventually(lambda: queue_is(redis, keys, 1))
            await http.post(f"{sim}/sim/faults", json={"down": True})  # its probe now fails
            resp = await asyncio.wait_for(queued, 60)  # far less than the queue's 300 s
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
    if resp.status_code == 200:  # a stream whose headers went out while it waited (1 s)
        assert stream
        error = orjson.loads(resp.text.strip().splitlines()[-1].removeprefix("data: "))["error"]
    else:
        assert resp.status_code == 503, resp.text
        error = resp.json()["error"]
        assert int(resp.headers["retry-after"]) >= 1
    assert error["code"] == "no_backend", error
    await eventually(lambda: queue_is(redis, keys, 0))
