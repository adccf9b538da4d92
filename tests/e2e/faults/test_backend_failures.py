"""Backends that fail: retried once before the first byte, an SSE error event after
it, 502 when nothing else can serve, and the circuit breaker takes a failing one out."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from simulator.faults import FaultSettings
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL, eventually


async def _answer_probe(writer: asyncio.StreamWriter) -> None:
    body = b'{"object":"list","data":[{"id":"sim-model","object":"model"}]}'
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()


async def _read_body(reader: asyncio.StreamReader, head: bytes) -> None:
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    await reader.readexactly(length)


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer GETs (probes) with the model list; drop every POST before a byte."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"GET"):
                break
            await _answer_probe(writer)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()


def _answering_posts(answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]) -> Callable[..., Any]:
    """A handler that answers GETs as ``_handle`` and the first POST with ``answer``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET"):
                    await _answer_probe(writer)
                    continue
                await _read_body(reader, head)
                await answer(reader, writer)
                break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return handler


async def _cut_error(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A 500 whose body breaks off."""
    writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                 b"content-length: 200\r\n\r\n{\"error\": {\"mess")
    await writer.drain()


async def _lingering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A whole streamed answer, [DONE] included, then the response kept open (the end of
    the body comes late, as a busy server's may)."""
    events = [
        b'{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
        b'{"id":"x","choices":[{"index":0,"delta":{"content":"Hi"}}]}',
        b'{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        b'{"id":"x","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}',
    ]
    body = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                 + b"%x\r\n" % len(body) + body + b"\r\n")
    await writer.drain()
    await reader.read()  # the end of the body never comes: until the gateway closes


def _serve(handler: Callable[..., Any]) -> Iterator[str]:
    """A real HTTP server on its own thread and loop."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(handler, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(server.close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    loop.close()


@pytest.fixture
def broken_backend() -> Iterator[str]:
    """Passes health probes but drops every inference request before answering a byte."""
    yield from _serve(_handle)


@pytest.fixture
def cut_error_backend() -> Iterator[str]:
    """Passes health probes; its error answer to inference breaks off mid-body."""
    yield from _serve(_answering_posts(_cut_error))


def chat(stream: bool = False, tokens: int = 5) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": tokens,
            "ignore_eos": True, "stream": stream}


async def test_failure_before_first_byte_is_retried_on_another_backend(
    gateway_factory: Callable[..., str], sim_url: str, broken_backend: str
) -> None:
    gw = gateway_factory([
        {"name": "broken", "url": broken_backend, "models": [MODEL], "max_concurrency": 4, "adaptive": False},
        {"name": "sim", "url": sim_url, "models": [MODEL], "max_concurrency": 4, "adaptive": False},
    ])
    async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
        for stream in (False, True, False, True, False, True):
            resp = await http.post("/v1/chat/completions", json=chat(stream))
            assert resp.status_code == 200, resp.text
            assert resp.headers["x-triage-backend"] == "sim"


async def test_no_alternative_gives_502(gateway_factory: Callable[..., str], broken_backend: str) -> None:
    gw = gateway_factory([{"name": "broken", "url": broken_backend, "models": [MODEL], "adaptive": False}])
    async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
        resp = await http.post("/v1/chat/completions", json=chat())
        assert resp.status_code == 502
        assert resp.json()["error"]["code"] == "bad_gateway"
        resp = await http.post("/v1/chat/completions", json=chat(stream=True))
        assert resp.status_code == 502


async def test_mid_stream_failure_ends_with_an_sse_error_event(gateway_factory: Callable[..., str]) -> None:
    faults = FaultSettings(drop_after_tokens=3)
    with running_simulator(SimSettings(profile="fast", model=MODEL, faults=faults)) as sim:
        gw = gateway_factory([{"name": "sim", "url": sim, "models": [MODEL], "adaptive": False}])
        async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
            async with http.stream("POST", "/v1/chat/completions", json=chat(True, 50)) as resp:
                assert resp.status_code == 200
                lines = [line async for line in resp.aiter_lines() if line.startswith("data: ")]
    assert '"error"' in lines[-1] and "stream_broken" in lines[-1]
    assert "[DONE]" not in lines[-1]


async def test_an_error_answer_that_breaks_off_gives_502_and_frees_the_slot(
    gateway_factory: Callable[..., str], cut_error_backend: str, redis: Redis, prefix: str
) -> None:
    gw = gateway_factory([{"name": "cut", "url": cut_error_backend, "models": [MODEL], "adaptive": False}])
    async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
        resp = await http.post("/v1/chat/completions", json=chat(stream=True))
    assert resp.status_code == 502
    assert resp.json()["error"]["code"] == "bad_gateway"
    assert "broke off" in resp.json()["error"]["message"]
    await eventually(lambda: slot_free(redis, prefix))


async def slot_free(redis: Redis, prefix: str) -> bool:
    return await readback.busy(redis, PoolKeys(prefix, "default"), "cut") == 0


@pytest.fixture
def lingering_backend() -> Iterator[str]:
    yield from _serve(_answering_posts(_lingering))


async def test_a_client_that_leaves_at_done_got_a_complete_answer(
    gateway_factory: Callable[..., str], lingering_backend: str, redis: Redis, prefix: str
) -> None:
    """Completion is what the client received: [DONE] and then a close is a success
    (counted ok, its length learned), not a client that left."""
    gw = gateway_factory([{"name": "linger", "url": lingering_backend, "models": [MODEL], "adaptive": False}])
    async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
        async with http.stream("POST", "/v1/chat/completions", json=chat(stream=True)) as resp:
            async for line in resp.aiter_lines():
                if line == "data: [DONE]":
                    break  # and close, as many clients do
        await eventually(lambda: slot_free_on(redis, prefix, "linger"))

        async def counted_ok() -> bool:
            return 'triage_outcome="ok"' in (await http.get("/metrics")).text

        await eventually(counted_ok)
        assert 'triage_outcome="client_gone"' not in (await http.get("/metrics")).text


async def slot_free_on(redis: Redis, prefix: str, backend: str) -> bool:
    return await readback.busy(redis, PoolKeys(prefix, "default"), backend) == 0

