"""``FastTransport`` against real servers on loopback: the simulator, and small raw
HTTP servers that answer with exactly the bytes a case needs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from gateway.upstream.transport import FastTransport
from tests.support import MODEL, eventually

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """Counts connections; each one is served by ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return head


def keep_answering(*responses: bytes) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for response in responses:
            await read_request(reader)
            writer.write(response)
            await writer.drain()
        await reader.read()  # until the client closes

    return handler


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=FastTransport(), timeout=httpx.Timeout(5.0, read=1.0)) as c:
        yield c


@pytest.fixture
async def roomy_client() -> AsyncIterator[httpx.AsyncClient]:
    """For many simulator streams at once: a busy machine may pause one for over a second."""
    async with httpx.AsyncClient(transport=FastTransport(), timeout=httpx.Timeout(30.0)) as c:
        yield c


def idle(client: httpx.AsyncClient) -> int:
    transport = client._transport
    assert isinstance(transport, FastTransport)
    return sum(len(conns) for conns in transport._idle.values())


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "ignore_eos": True}


async def test_streams_and_whole_answers_from_the_simulator(roomy_client: httpx.AsyncClient, sim_url: str) -> None:
    client = roomy_client  # the simulator runs on this machine's other threads
    async with client.stream("POST", f"{sim_url}/v1/chat/completions", json={**CHAT, "stream": True}) as resp:
        assert resp.status_code == 200
        body = b"".join([chunk async for chunk in resp.aiter_raw()])
    assert body.endswith(b"data: [DONE]\n\n")
    assert body.count(b"data: {") == 21  # the role chunk, one per token (vLLM: the finish on the last)
    whole = await client.post(f"{sim_url}/v1/chat/completions", json=CHAT)
    assert whole.status_code == 200
    assert whole.json()["usage"]["completion_tokens"] == 20
    assert (await client.get(f"{sim_url}/nope")).status_code == 404
    assert idle(client) == 1  # one connection served all three


async def test_many_at_once_then_reused(roomy_client: httpx.AsyncClient, sim_url: str) -> None:
    client = roomy_client

    async def one() -> None:
        resp = await client.post(f"{sim_url}/v1/chat/completions", json={**CHAT, "stream": True})
        assert resp.text.endswith("data: [DONE]\n\n")

    await asyncio.gather(*(one() for _ in range(50)))
    assert idle(client) == 50
    await asyncio.gather(*(one() for _ in range(50)))
    assert idle(client) == 50


async def test_closing_a_stream_early_closes_its_connection(roomy_client: httpx.AsyncClient, sim_url: str) -> None:
    client = roomy_client
    before = (await client.get(f"{sim_url}/sim/stats")).json()["aborts"]
    idle_before = idle(client)
    body = {**CHAT, "max_tokens": 5000, "stream": True}
    async with client.stream("POST", f"{sim_url}/v1/chat/completions", json=body) as resp:
        async for _ in resp.aiter_raw():
            break
    assert idle(client) == idle_before - 1 if idle_before else idle(client) == 0

    async def aborted() -> bool:  # the session's simulator: other tests' aborts may add up
        return (await client.get(f"{sim_url}/sim/stats")).json()["aborts"] >= before + 1

    await eventually(aborted)


async def test_chunked_body_split_anywhere_with_trailers(client: httpx.AsyncClient) -> None:
    payload = (b"5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\nx-trailer: 1\r\n\r\n")

    async def byte_by_byte(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for i in range(len(payload)):
                writer.write(payload[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0)
        await reader.read()

    server = RawServer(byte_by_byte)
    async with server as url:
        for _ in range(2):
            resp = await client.get(url)
            assert resp.content == b"hello world!"
    assert server.connections == 1


async def test_content_length_keep_alive_and_connection_close(client: httpx.AsyncClient) -> None:
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    closing = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nbye"
    server = RawServer(keep_answering(ok, ok, closing))
    async with server as url:
        assert [(await client.get(url)).text for _ in range(3)] == ["ok", "ok", "bye"]
        assert idle(client) == 0
        assert (await client.get(url)).text == "ok"
    assert server.connections == 2


async def test_a_connection_the_server_closed_while_idle_is_replaced(client: httpx.AsyncClient) -> None:
    async def one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()

    server = RawServer(one_then_close)
    async with server as url:
        assert (await client.get(url)).text == "ok"
        assert (await client.get(url)).text == "ok"
    assert server.connections == 2


async def test_errors_are_httpx_errors(client: httpx.AsyncClient) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(3)

    async def cut_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel")
        await writer.drain()

    async def not_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-nope\r\n\r\n")
        await writer.drain()

    async with RawServer(silent) as url:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(url)
    async with RawServer(cut_mid_body) as url:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(url)
    async with RawServer(not_http) as url:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(url)
    closed = RawServer(silent)
    async with closed as url:
        pass
    with pytest.raises(httpx.ConnectError):
        await client.get(url)
    assert idle(client) == 0


async def test_a_read_timeout_is_per_read_not_per_response(client: httpx.AsyncClient) -> None:
    async def slow_but_steady(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(8):  # 2 s in all, 0.25 s apart: well under the 1 s read timeout each time
            await asyncio.sleep(0.25)
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with RawServer(slow_but_steady) as url:
        assert (await client.get(url)).content == b"x" * 8


async def test_a_shorter_read_timeout_after_a_longer_one_holds() -> None:
    """A probe (5 s) after a request (600 s) on the same connection must time out on its
    own deadline, not on the earlier read's (the watchdog timer is moved earlier)."""
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

    async def answer_once_then_hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok)
        await writer.drain()
        await reader.read()  # the second request never gets an answer

    async with RawServer(answer_once_then_hang) as url, httpx.AsyncClient(transport=FastTransport()) as c:
        first = await c.get(f"{url}/a", timeout=httpx.Timeout(5.0, read=600.0))
        assert first.text == "ok"
        async with asyncio.timeout(60):  # a hang guard, far from both deadlines
            with pytest.raises(httpx.ReadTimeout):
                await c.get(f"{url}/b", timeout=httpx.Timeout(5.0, read=0.2))


async def test_the_gateways_client_keeps_no_cookie_from_one_answer_for_the_next() -> None:
    """One client carries every tenant's requests: a backend's ``Set-Cookie`` is not sent back."""
    from gateway.upstream.client import make_client

    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            seen.append(await read_request(reader))
            writer.write(b"HTTP/1.1 200 OK\r\nset-cookie: session=tenant-a; Path=/\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
        await reader.read()

    async with RawServer(handler) as url:
        client = make_client(5.0)
        async with client:
            for _ in range(2):
                resp = await client.get(f"{url}/v1/models")
                assert resp.status_code == 200 and resp.headers["set-cookie"].startswith("session=")
            assert len(client.cookies) == 0
    assert len(seen) == 2 and all(b"cookie:" not in head.lower() for head in seen), seen
