"""A minimal HTTP/1.1 client protocol over keep-alive connections, for one process
to drive a thousand streams a second on one core.

A general client (httpx) spends tens of microseconds per chunk in Python; here the
request is pre-encoded bytes, responses are parsed by ``httptools`` (llhttp, in C),
and a body callback does one compiled-regex scan for content frames. Timestamps are
``time.perf_counter_ns()`` taken in the callbacks, so they include the event loop's
delay in noticing the bytes, as any client's would.

Content frames are recognised by ``"content":"<something>"``: the first one ends
TTFT, each one counts as a token, and their arrival gaps are the ITL samples. Frames
that arrive in one read share one timestamp (gap 0), which is what a client sees.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

import httptools

CONTENT = re.compile(rb'"content":\s*"[^"]')
COMPLETION_TOKENS = re.compile(rb'"completion_tokens":\s*(\d+)')


def encode_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """A complete HTTP/1.1 POST, keep-alive, as bytes ready to write."""
    lines = [f"POST {path} HTTP/1.1", f"host: {host}:{port}", "content-type: application/json",
             f"content-length: {len(body)}", "connection: keep-alive"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body


class Exchange:
    """One request's timing and outcome, filled in by the connection."""

    __slots__ = ("index", "due_ns", "sent_ns", "first_ns", "last_ns", "end_ns", "status", "tokens",
                 "error", "gaps", "body")

    def __init__(self, index: int, due_ns: int, keep_gaps: bool, keep_body: bool) -> None:
        self.index = index
        self.due_ns = due_ns  # when the schedule wanted it sent
        self.sent_ns = 0
        self.first_ns = 0  # first content frame (streams) or first body byte (non-streamed)
        self.last_ns = 0
        self.end_ns = 0
        self.status = 0
        self.tokens = 0
        self.error = ""  # "" (none), "http_<status>", "connection", "parse", "timeout", "no_connection"
        self.gaps: list[int] | None = [] if keep_gaps else None
        self.body: bytearray | None = bytearray() if keep_body else None


class Connection(asyncio.Protocol):
    """One keep-alive connection carrying one exchange at a time."""

    def __init__(self, on_done: Callable[[Connection, Exchange], None],
                 on_closed: Callable[[Connection], None]) -> None:
        self._on_done = on_done
        self._on_closed = on_closed
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self._fail("parse")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail("connection")
        self._on_closed(self)

    # sending
    def send(self, request: bytes, exchange: Exchange) -> None:
        assert self.transport is not None
        self.exchange = exchange
        exchange.sent_ns = time.perf_counter_ns()
        self.transport.write(request)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    # httptools callbacks
    def on_headers_complete(self) -> None:
        ex = self.exchange
        if ex is not None:
            ex.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        ex = self.exchange
        if ex is None:
            return
        now = time.perf_counter_ns()
        if ex.body is not None:
            if not ex.first_ns:
                ex.first_ns = now
            ex.body += body
            return
        n = len(CONTENT.findall(body))
        if not n:
            return
        if not ex.first_ns:
            ex.first_ns = now
        elif ex.gaps is not None:
            ex.gaps.append(now - ex.last_ns)
        if ex.gaps is not None and n > 1:
            ex.gaps.extend([0] * (n - 1))  # frames that came in one read
        ex.last_ns = now
        ex.tokens += n

    def on_message_complete(self) -> None:
        ex, self.exchange = self.exchange, None
        if ex is None:
            return
        ex.end_ns = time.perf_counter_ns()
        if ex.status != 200:
            ex.error = f"http_{ex.status}"
        elif ex.body is not None:
            match = COMPLETION_TOKENS.search(ex.body)
            ex.tokens = int(match.group(1)) if match else 0
            ex.body = None
        elif not ex.first_ns:
            ex.error = "no_content"
        keep = self._parser.should_keep_alive()
        self._on_done(self, ex)
        if not keep:
            self.close()

    def _fail(self, error: str) -> None:
        ex, self.exchange = self.exchange, None
        if ex is not None:
            ex.end_ns = time.perf_counter_ns()
            ex.error = error
            self._on_done(self, ex)
