"""Slow, idle and too many clients, over raw sockets against a gateway served as
``triage serve`` serves it (gateway/server/connections.py, gateway/api/body.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from gateway.settings import Settings
from loadtests.chaos.rawhttp import Reply, exchange, read_reply, request
from tests.support import MODEL, serving_gateway

CHAT = orjson.dumps({"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})


@pytest.fixture
def serve(redis_url: str, prefix: str, sim_url: str) -> Iterator[Any]:
    from contextlib import ExitStack

    with ExitStack() as stack:

        def start(**overrides: Any) -> tuple[str, int]:
            values: dict[str, Any] = {
                "redis_url": redis_url, "key_prefix": prefix,
                "backends": [{"name": "sim", "url": sim_url, "models": [MODEL], "max_concurrency": 4}],
                **overrides,
            }
            url = urlsplit(stack.enter_context(serving_gateway(Settings.model_validate(values))))
            assert url.hostname and url.port
            return url.hostname, url.port

        yield start


def _openai(reply: Reply, status: int, code: str) -> None:
    assert reply.status == status, reply
    err = reply.error()
    assert err is not None and err["code"] == code, reply.body


async def test_a_head_trickled_a_byte_at_a_time_is_cut_off_with_408(serve: Any) -> None:
    host, port = serve(header_timeout_s=0.5)
    reply = await exchange(host, port, request("POST", "/v1/chat/completions", CHAT), trickle_s=0.05)
    _openai(reply, 408, "request_timeout")


async def test_a_connection_that_sends_nothing_is_cut_off(serve: Any) -> None:
    host, port = serve(header_timeout_s=0.3)
    reply = await exchange(host, port, b"")
    _openai(reply, 408, "request_timeout")


async def test_a_body_that_stops_arriving_gets_408_and_the_connection_closes(serve: Any) -> None:
    host, port = serve(body_timeout_s=0.3)
    head = request("POST", "/v1/chat/completions", headers={"content-length": "500"}, close=False)
    reply = await exchange(host, port, head + b'{"model": ')  # and then nothing
    _openai(reply, 408, "request_timeout")
    assert reply.headers["connection"] == "close"


async def test_a_head_over_the_size_limit_gets_431(serve: Any) -> None:
    host, port = serve(max_header_bytes=2048)
    reply = await exchange(host, port, request("GET", "/v1/models", headers={"x-junk": "a" * 4096}))
    _openai(reply, 431, "header_too_large")


async def test_what_is_not_http_gets_an_openai_shaped_400(serve: Any) -> None:
    host, port = serve()
    reply = await exchange(host, port, b"\x00\x01GARBAGE \xff\r\n\r\n")
    _openai(reply, 400, "invalid_http")


async def test_past_the_connection_cap_new_requests_get_503_and_health_is_still_served(serve: Any) -> None:
    host, port = serve(max_connections=3, header_timeout_s=60)
    held = [await asyncio.open_connection(host, port) for _ in range(3)]  # idle, heads not sent
    try:
        busy = await exchange(host, port, request("GET", "/v1/models"))
        _openai(busy, 503, "too_many_connections")
        assert busy.headers["retry-after"] == "1"
        health = await exchange(host, port, request("GET", "/health"))
        assert health.status == 200
    finally:
        for _, writer in held:
            writer.close()
    # below the cap again: served
    assert (await _until_served(host, port)).status == 200


async def _until_served(host: str, port: int) -> Reply:
    for _ in range(200):  # the held connections' close reaches the server asynchronously
        reply = await exchange(host, port, request("GET", "/v1/models"))
        if reply.status != 503:
            return reply
        await asyncio.sleep(0.02)
    return reply


async def test_a_kept_alive_connection_left_idle_is_closed(serve: Any) -> None:
    host, port = serve(keep_alive_timeout_s=0.3)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request("GET", "/health", close=False))
        await writer.drain()
        async with asyncio.timeout(30):
            await reader.readuntil(b'{"status":"ok"}')
            assert await reader.read() == b""  # the server closed it
    finally:
        writer.close()


async def test_an_oversized_body_gets_its_413_not_a_reset(serve: Any) -> None:
    """The body is read and thrown away before the 413, so a client that sends all of
    it (in pieces, as a real client does) and then reads always sees the answer:
    declared and chunked, ten times each."""
    host, port = serve(max_body_bytes=256 * 1024)
    body = b'{"model": "' + b"x" * 406_000 + b'"}'
    pieces = [body[i:i + 16384] for i in range(0, len(body), 16384)]
    declared = request("POST", "/v1/chat/completions", headers={"content-length": str(len(body))})
    chunked_head = request("POST", "/v1/chat/completions", headers={"transfer-encoding": "chunked"})
    chunked_head = chunked_head.replace(b"content-length: 0\r\n", b"")
    chunks = [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces] + [b"0\r\n\r\n"]
    for head, parts in [(declared, pieces)] * 10 + [(chunked_head, chunks)] * 10:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(head)
            for part in parts:
                writer.write(part)
                await writer.drain()  # a reset here: the server stopped reading
            reply = Reply()
            async with asyncio.timeout(30):
                await read_reply(reader, reply)
        finally:
            writer.close()
        _openai(reply, 413, "payload_too_large")
        assert reply.headers["connection"] == "close"


async def test_a_normal_request_is_served(serve: Any) -> None:
    host, port = serve()
    reply = await exchange(host, port, request("POST", "/v1/chat/completions", CHAT))
    assert reply.status == 200, reply
