"""A scripted backend double: a real HTTP/1.1 server on loopback, on its own thread.

It answers every GET (the gateway's probes) with its model list and each POST with the
next answer of its script (the last one repeats), over keep-alive connections. It
counts what it got, and, for a refusal that asked for a ``Retry-After``, how many
requests still came inside the window it asked for (``early``), by its own clock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import orjson

from tests.support import MODEL

VLLM_FULL = orjson.dumps({"object": "error", "message": "The waiting queue is full.", "type": "ServiceUnavailable",
                          "param": None, "code": 503})
RATE_LIMITED = orjson.dumps({"error": {"message": "Rate limit reached", "type": "rate_limit_error",
                                       "code": "rate_limit_exceeded", "param": None}})
EVENTS = [
    {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hi"}}]},
    {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"id": "x", "object": "chat.completion.chunk", "choices": [],
     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
]
COMPLETION = orjson.dumps({
    "id": "x", "object": "chat.completion", "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
})


@dataclass(frozen=True)
class Answer:
    """One answer to a POST: a refusal (``status`` not 200) or a completion."""

    status: int = 200
    body: bytes = b""
    retry_after: str | None = None  # the header, as sent
    retry_at_s: float | None = None  # or: an HTTP-date this many seconds after the answer
    window_s: float = 0.0  # the cool-down that header asks for (for counting `early`)
    hold: threading.Event | None = None  # a completion that waits for this before its last event
    framing: bytes = b"\n\n"  # what ends each SSE event (b"\r\n\r\n" as sse-starlette writes)
    data: bytes = b"data: "  # b"data:" as TGI writes


def refuse(status: int, body: bytes, retry_after: str | None = None, window_s: float = 0.0) -> Answer:
    return Answer(status, body, retry_after=retry_after, window_s=window_s)


@dataclass
class ScriptedBackend:
    script: list[Answer]
    url: str = ""
    posts: int = 0
    early: int = 0  # POSTs that came while a refusal's Retry-After window was open
    bodies: list[bytes] = field(default_factory=list)
    _window_until: float = 0.0

    def _next(self) -> Answer:
        if time.monotonic() < self._window_until:
            self.early += 1
        answer = self.script[min(self.posts, len(self.script) - 1)]
        self.posts += 1
        if answer.window_s:
            self._window_until = time.monotonic() + answer.window_s
        return answer

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET"):
                    await _send(writer, 200, orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}))
                    continue
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                body = await reader.readexactly(length)
                self.bodies.append(body)
                answer = self._next()
                if answer.status != 200:
                    extra = {"retry-after": answer.retry_after} if answer.retry_after is not None else {}
                    if answer.retry_at_s is not None:
                        at = datetime.now(UTC) + timedelta(seconds=answer.retry_at_s)
                        extra = {"retry-after": format_datetime(at, usegmt=True)}
                    await _send(writer, answer.status, answer.body, extra)
                elif orjson.loads(body).get("stream"):
                    await _stream(writer, answer)
                else:
                    await _send(writer, 200, COMPLETION)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
    for name, value in (headers or {}).items():
        head += f"{name}: {value}\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    await writer.drain()


async def _stream(writer: asyncio.StreamWriter, answer: Answer) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    events = [answer.data + orjson.dumps(e) + answer.framing for e in EVENTS] + [answer.data + b"[DONE]" + answer.framing]
    for i, event in enumerate(events):
        if answer.hold is not None and i == len(events) - 1:
            await asyncio.get_running_loop().run_in_executor(None, answer.hold.wait, 30)
        writer.write(b"%x\r\n" % len(event) + event + b"\r\n")
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


@contextmanager
def scripted_backend(*script: Answer) -> Iterator[ScriptedBackend]:
    backend = ScriptedBackend(list(script))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(asyncio.start_server(backend.handle, "127.0.0.1", 0), loop).result(10)
    backend.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield backend
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()
