"""A model whose every backend is down gets a prompt 503 no_backend with Retry-After,
not a wait of queue_timeout_s; with a grace, at most the grace (a probing breaker may
close first)."""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import orjson
import pytest

from tests.support import MODEL

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
