"""An HTTP/1.1 transport for httpx on asyncio streams: the upstream hot path.

httpx's default transport (httpcore) walks every pooled connection on each request
start and each response close (``is_idle`` / ``has_expired``, which read socket
state): O(connections) per request, the largest item in the gateway's profile under
load. Here each origin has a stack of idle keep-alive connections: a request takes
the newest, a response read to its end pushes its connection back — O(1).

Scope: ``http://`` (``https://`` goes to httpx's own transport), request bodies known
up front, response bodies framed by Content-Length, chunked encoding or the end of
the connection. A connection is reused only when its response was read to the end; a
response closed early closes its connection, which is how an engine learns to abort.

Every failure is one of httpx's own exceptions, so ``upstream.py`` stays the single
place they become gateway errors::

    httpx.ConnectError / ConnectTimeout   no connection
    httpx.WriteError / WriteTimeout       the request could not be sent
    httpx.ReadError / ReadTimeout         the connection broke or went silent
    httpx.RemoteProtocolError             not HTTP/1.x, or closed mid-message

A request on a reused connection that the server had already closed (no byte of an
answer came back) is sent once more on a new connection, as other clients do.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx

from gateway.upstream.connection import (
    MAX_HEAD,
    READ_SIZE,
    Conn,
    Stale,
    encode_head,
    parse_head,
)

_NO_BODY_STATUS = frozenset((204, 304))


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


class _Body(httpx.AsyncByteStream):
    """A response body; its connection goes back to the pool only if read to the end."""

    def __init__(
        self, transport: FastTransport, origin: tuple[str, int], conn: Conn, request: httpx.Request | None,
        read_timeout: float | None, length: int | None, chunked: bool, keep_alive: bool,
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._conn: Conn | None = conn
        self._request = request
        self._timeout = read_timeout
        self._length = length  # Content-Length; None: chunked or until close
        self._chunked = chunked
        self._keep_alive = keep_alive

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._conn is None:
            return _nothing()
        return self._chunked_body(self._conn) if self._chunked else self._plain_body(self._conn)

    async def _plain_body(self, conn: Conn) -> AsyncIterator[bytes]:
        try:
            if self._length is not None:
                left = self._length
                while left > 0:
                    data = await conn.read(self._timeout, self._request)
                    if not data:
                        raise self._cut()
                    if len(data) > left:  # more than the message: the connection is not reusable
                        self._keep_alive = False
                        data = data[:left]
                    left -= len(data)
                    yield data
            else:
                while data := await conn.read(self._timeout, self._request):
                    yield data
                self._keep_alive = False
        except BaseException:
            self._drop()
            raise
        self._done()

    async def _chunked_body(self, conn: Conn) -> AsyncIterator[bytes]:
        """Chunk payloads, decoded: whatever one read brought, joined into one piece."""
        buf = b""
        left = 0  # bytes of the current chunk's data still to come
        crlf = False  # a chunk's data has ended; its CRLF is next
        tail: bytes | None = None  # after the last chunk: trailers (rare) and an empty line
        try:
            while tail is None:
                data = await conn.read(self._timeout, self._request)
                if not data:
                    raise self._cut()
                buf = buf + data if buf else data
                out: list[bytes] = []
                pos, end = 0, len(buf)
                while pos < end:
                    if left:
                        take = min(left, end - pos)
                        out.append(buf[pos : pos + take])
                        pos += take
                        left -= take
                        if left:
                            break
                        crlf = True
                    if crlf:
                        if end - pos < 2:
                            break
                        if buf[pos : pos + 2] != b"\r\n":
                            raise httpx.RemoteProtocolError("malformed chunked body", request=self._request)
                        pos += 2
                        crlf = False
                        continue
                    eol = buf.find(b"\r\n", pos)
                    if eol < 0:
                        if end - pos > 1024:
                            raise httpx.RemoteProtocolError("chunk size line too long", request=self._request)
                        break
                    try:
                        size = int(buf[pos:eol].split(b";", 1)[0], 16)
                    except ValueError:
                        raise httpx.RemoteProtocolError("malformed chunk size", request=self._request) from None
                    pos = eol + 2
                    if size == 0:
                        tail = buf[eol:]
                        break
                    left = size
                buf = buf[pos:] if pos < end else b""
                if out:
                    yield out[0] if len(out) == 1 else b"".join(out)
            while b"\r\n\r\n" not in tail:
                more = await conn.read(self._timeout, self._request)
                if not more:
                    raise self._cut()
                tail += more
            if tail.index(b"\r\n\r\n") + 4 != len(tail):
                self._keep_alive = False  # bytes after the message
        except BaseException:
            self._drop()
            raise
        self._done()

    def _cut(self) -> httpx.RemoteProtocolError:
        return httpx.RemoteProtocolError("the backend closed the connection mid-body", request=self._request)

    def _done(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._keep_alive:
            self._transport._checkin(self._origin, conn)
        else:
            conn.close()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def aclose(self) -> None:
        self._drop()  # closed before its end: the backend sees the disconnect and aborts


class FastTransport(httpx.AsyncBaseTransport):
    def __init__(self, keepalive_expiry: float = 30.0, max_idle_per_origin: int = 512) -> None:
        self._expiry = keepalive_expiry
        self._max_idle = max_idle_per_origin
        self._idle: dict[tuple[str, int], deque[Conn]] = {}
        self._tls: httpx.AsyncHTTPTransport | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            if self._tls is None:
                self._tls = httpx.AsyncHTTPTransport()
            return await self._tls.handle_async_request(request)
        body = await request.aread()
        message = encode_head(request, len(body)) + body
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        status, meta, headers, stream = await self._send((url.host, url.port or 80), request.method, message,
                                                         timeouts, request)
        version, _, reason = meta.partition(b"\x00")
        return httpx.Response(
            status, headers=headers, stream=stream,
            extensions={"http_version": version, "reason_phrase": reason},
        )

    async def send_message(
        self, origin: tuple[str, int], method: str, message: bytes, timeouts: dict[str, Any]
    ) -> tuple[int, list[tuple[bytes, bytes]], httpx.AsyncByteStream]:
        """A whole request message (head and body, ``connection.encode_post``) sent to
        ``origin`` over plain HTTP, without an ``httpx.Request``: the status, the raw headers
        and the body (closed early, it closes its connection). Errors as above."""
        status, _, headers, stream = await self._send(origin, method, message, timeouts, None)
        return status, headers, stream

    async def _send(
        self, origin: tuple[str, int], method: str, message: bytes, timeouts: dict[str, Any],
        request: httpx.Request | None,
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]], _Body]:
        conn = self._checkout(origin)
        if conn is not None:
            try:
                return await self._exchange(origin, conn, method, request, message, timeouts)
            except Stale:
                pass  # closed by the server while idle: once more on a new connection
        conn = await self._connect(origin, request, timeouts.get("connect"))
        try:
            return await self._exchange(origin, conn, method, request, message, timeouts)
        except Stale:
            raise httpx.RemoteProtocolError("the backend closed the connection without answering", request=request) from None

    async def _exchange(
        self, origin: tuple[str, int], conn: Conn, method: str, request: httpx.Request | None, message: bytes,
        timeouts: dict[str, Any],
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]], _Body]:
        read_timeout = timeouts.get("read")
        try:
            conn.writer.write(message)
            if conn.writer.transport.get_write_buffer_size() > READ_SIZE:
                try:
                    async with asyncio.timeout(timeouts.get("write")):
                        await conn.writer.drain()
                except TimeoutError:
                    raise httpx.WriteTimeout("timed out sending to the backend", request=request) from None
                except OSError as exc:
                    raise httpx.WriteError(str(exc) or exc.__class__.__name__, request=request) from exc
            while True:
                head = await conn.read_head(read_timeout, request)
                status, meta, headers = parse_head(head, request)
                if not 100 <= status < 200 or status == 101:
                    break  # interim (1xx) answers are skipped
            length: int | None = None
            chunked = False
            keep_alive = meta.startswith(b"HTTP/1.1\x00")
            for name, value in headers:
                lower = name.lower()
                if lower == b"content-length":
                    if not value.isdigit():
                        raise httpx.RemoteProtocolError("malformed content-length", request=request)
                    length = int(value)
                elif lower == b"transfer-encoding":
                    chunked = value.lower().endswith(b"chunked")
                elif lower == b"connection":
                    tokens = value.lower()
                    if b"close" in tokens:
                        keep_alive = False
                    elif b"keep-alive" in tokens:
                        keep_alive = True
            if chunked:
                length = None
            if method == "HEAD" or status in _NO_BODY_STATUS:
                length, chunked = 0, False
        except BaseException:
            conn.close()
            raise
        stream = _Body(self, origin, conn, request, read_timeout, length, chunked, keep_alive)
        if length == 0:
            stream._done()
        return status, meta, headers, stream

    def _checkout(self, origin: tuple[str, int]) -> Conn | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()  # the newest: the least likely to have been closed by the server
            if conn.alive() and now - conn.idle_since < self._expiry:
                return conn
            conn.close()
        return None

    def _checkin(self, origin: tuple[str, int], conn: Conn) -> None:
        if self._closed or not conn.alive():
            conn.close()
            return
        idle = self._idle.get(origin)
        if idle is None:
            idle = self._idle[origin] = deque()
        now = asyncio.get_running_loop().time()
        conn.idle_since = now
        idle.append(conn)
        # the oldest sit at the bottom: close the expired or dead ones there, a few at a time
        while idle and (len(idle) > self._max_idle or not idle[0].alive() or now - idle[0].idle_since >= self._expiry):
            idle.popleft().close()

    async def _connect(self, origin: tuple[str, int], request: httpx.Request | None, limit_s: float | None) -> Conn:
        try:
            async with asyncio.timeout(limit_s):
                reader, writer = await asyncio.open_connection(origin[0], origin[1], limit=MAX_HEAD)
        except TimeoutError:
            raise httpx.ConnectTimeout("timed out connecting to the backend", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or exc.__class__.__name__, request=request) from exc
        return Conn(reader, writer)

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        self._idle.clear()
        if self._tls is not None:
            await self._tls.aclose()
