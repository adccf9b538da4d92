"""Streams in the framings real servers write, through the gateway: each event reaches
the client as soon as the backend sent it, and the usage chunk the gateway asked for is
read (the request's tokens are counted) and stripped for a client that did not ask."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from tests.e2e.faults.scripted import Answer, scripted_backend
from tests.support import MODEL, eventually


@pytest.mark.parametrize(
    ("name", "framing", "data"),
    [("vllm", b"\n\n", b"data: "), ("tgi", b"\n\n", b"data:"), ("sse-starlette", b"\r\n\r\n", b"data: "),
     ("bare-cr", b"\r\r", b"data:")],
)
async def test_each_event_arrives_before_the_stream_ends(
    gateway_factory: Callable[..., str], name: str, framing: bytes, data: bytes
) -> None:
    release = threading.Event()  # the backend holds its [DONE] until the client has the text
    with scripted_backend(Answer(hold=release, framing=framing, data=data)) as engine:
        gw = gateway_factory([{"name": name, "url": engine.url, "models": [MODEL], "adaptive": False}])
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
                assert resp.status_code == 200
                seen, chunks = b"", resp.aiter_raw()
                async for chunk in chunks:
                    seen += chunk
                    if b'"content":"Hi"' in seen and b'"finish_reason":"stop"' in seen:
                        break  # the text is here while the backend still holds the end
                release.set()
                seen += b"".join([chunk async for chunk in chunks])
            assert b'"usage"' not in seen  # asked for by the gateway, not by the client
            assert seen.endswith(data + b"[DONE]" + framing)

            async def tokens_counted() -> bool:  # the usage was read
                lines = (await http.get("/metrics")).text.splitlines()
                return any(line.startswith("triage_output_tokens_total{") and line.endswith(" 1") for line in lines)

            await eventually(tokens_counted)
