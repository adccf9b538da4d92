"""Relay a backend's SSE stream to the client, unchanged but for the usage chunk.

Chunks are forwarded as whole SSE events, byte for byte, in any framing the SSE spec
allows (``sse.py``): nothing is decoded or re-encoded except an event that carries a
non-null ``usage`` (one per stream), which is parsed for the token count and dropped
when it is a usage-only chunk and the client did not ask for it. vLLM stamps its
``system_fingerprint`` on the last chunk of a stream — the usage chunk when usage was
asked for, else the finish chunk — so where the gateway asked and the client did not,
the finish chunk waits for the usage chunk (it comes next) and takes its fingerprint:
the client gets the stream the engine sends a client that did not ask.

``RelayResponse`` guarantees the cleanup: whatever ends the stream (its end, the
client leaving, an error), ``on_done`` runs once, outside any cancelled scope, and
closes the upstream connection — engines abort on that — and gives the slot back.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import anyio
import orjson
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway import sse
from gateway.request.disconnect import ClientGone, DisconnectWatch
from gateway.telemetry.stream_stats import StreamStats
from gateway.upstream.client import UpstreamError, UpstreamResponse, upstream_errors

_USAGE_MARKS = (b'"usage":{', b'"usage": {')
# a chunk that carries generated text or a tool call (a first chat chunk often has only the role)
_CONTENT = re.compile(rb'"(?:content|text|reasoning_content)": ?"[^"]|"tool_calls": ?\[ ?\{')
_DONE = re.compile(rb"(?:^|(?<=[\r\n]))data: ?\[DONE\][ \t]*(?:\r\n|\r|\n)")
_FINISH = re.compile(rb'"finish_reason": ?"')
_FINGERPRINT = b'"system_fingerprint"'


def _has_usage(block: bytes) -> bool:
    return _USAGE_MARKS[0] in block or _USAGE_MARKS[1] in block


async def relay_events(
    response: UpstreamResponse, keep_usage: bool, stats: StreamStats, trailer: bytes | None = None
) -> AsyncGenerator[bytes, None]:
    """Every complete event the upstream read brought, as one block, as soon as it came.

    The common framing (LF only, as vLLM, SGLang and TGI write it) is cut with one
    ``rfind``; a stream that shows a CR where no LF LF ends an event (``\r\n`` from
    sse-starlette, or bare ``\r``) is cut from then on where the spec says an event
    ends (``sse.event_end``). Either way the
    bytes go out unchanged, but for the usage chunk. ``trailer`` (a comment) goes
    out just before ``[DONE]``."""
    pending = b""
    lf_only = True  # no CR seen so far: events end in LF LF (sticky once a CR shows)
    lone_lf = False  # a dropped event ended in CR: an LF that starts the next read is its own
    try:
        with upstream_errors():
            async for chunk in response.aiter_raw():
                data = pending + chunk if pending else chunk
                if lone_lf and data:
                    data, lone_lf = data.removeprefix(b"\n"), False
                cut = data.rfind(b"\n\n") + 2 if lf_only else 0  # 1: none
                if cut <= 1:
                    if not lf_only or b"\r" in data:  # cut where the spec says an event ends
                        lf_only = False
                        cut = sse.event_end(data)
                    if cut <= 1:
                        pending = data
                        continue
                if not keep_usage and lf_only:
                    cut = _hold_finish(data, cut)  # it may take the usage chunk's fingerprint
                    if cut <= 1:
                        pending = data
                        continue
                block, pending = data[:cut], data[cut:]
                if _has_usage(block):
                    block, lone_lf = _take_usage(block, keep_usage, stats)
                    if not block:
                        continue
                if stats.part_first_at is None and _CONTENT.search(block):
                    stats.part_first_at = time.monotonic()
                    if stats.first_chunk_at is None:
                        stats.first_chunk_at = stats.part_first_at
                stats.events += block.count(b"data:")
                if b"[DONE]" not in block or (done := _DONE.search(block)) is None:
                    yield block
                    continue
                stats.events -= 1
                if trailer is not None:
                    block = block[: done.start()] + trailer + block[done.start() :]
                yield block
                stats.ended_at = time.monotonic()  # the client has the whole answer:
                stats.completed = True  # whatever happens next, it is complete
            if pending:
                yield pending
            stats.ended_at = time.monotonic()
            stats.completed = True
    except UpstreamError as exc:
        stats.error = str(exc)
        yield sse.error(f"the inference backend failed mid-stream: {stats.error}", "upstream_error", "stream_broken")


def _hold_finish(data: bytes, cut: int) -> int:
    """Where to cut ``data`` (complete events end at ``cut``, LF framing) so that a
    finish chunk that ends them waits for the next event."""
    start = data.rfind(b"\n\n", 0, cut - 2) + 2  # 1: the first event
    start = 0 if start == 1 else start
    last = data[start:cut]
    if _FINISH.search(last) and _FINGERPRINT not in last:
        return start if start > 0 else 1
    return cut


def _take_usage(block: bytes, keep_usage: bool, stats: StreamStats) -> tuple[bytes, bool]:
    """Read the usage from the events that carry it; drop a usage-only chunk (the one
    the gateway asked for) when the client did not ask, and give its fingerprint to the
    finish chunk before it. A content chunk that carries usage (TGI's way) goes out as
    it came. Also says whether the block's last event was dropped and ended in CR (an LF
    that follows is then dropped too)."""
    out: list[bytes] = []
    dropped_cr = False
    finish: int | None = None  # where in out the last finish chunk is
    for raw in sse.split_events(block):
        dropped_cr = False
        if _FINISH.search(raw):
            finish = len(out)
        if not _has_usage(raw):
            out.append(raw)
            continue
        usage_only, fingerprint = False, None
        for event in sse.parse(raw):
            try:
                chunk = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(chunk, dict) and isinstance(usage := chunk.get("usage"), dict):
                stats.usage = usage
                usage_only = not chunk.get("choices")
                fingerprint = chunk.get("system_fingerprint")
        if usage_only and not keep_usage:
            if isinstance(fingerprint, str) and finish is not None and _FINGERPRINT not in out[finish]:
                out[finish] = _stamp(out[finish], fingerprint)
            dropped_cr = raw.endswith(b"\r")
            out.append(raw[: len(raw) - len(raw.lstrip(b"\r\n"))])  # line ends before it are the last event's
            continue
        out.append(raw)
    return b"".join(out), dropped_cr


def _stamp(raw: bytes, fingerprint: str) -> bytes:
    """The finish chunk ``raw`` as the engine writes it when it is the stream's last."""
    end = raw.rfind(b"}")
    return raw[:end] + b',"system_fingerprint":' + orjson.dumps(fingerprint) + raw[end:] if end >= 0 else raw


class RelayResponse(StreamingResponse):
    """A streaming response that always runs its cleanup, once, shielded from cancellation.

    Plain ASGI rather than Starlette's ``StreamingResponse.__call__`` (a task group
    and two tasks per stream): the start message, then one body message per block
    the upstream read brought (every complete SSE event in it, as one write). The
    client leaving is noticed by one ``DisconnectWatch`` task, which cancels the
    relay wherever it waits. The body generator is then closed explicitly (its
    ``finally`` blocks run now, not at garbage collection), and ``on_done`` closes the
    upstream and gives the slot back.
    """

    def __init__(
        self,
        body: AsyncGenerator[bytes, None],
        stats: StreamStats,
        headers: dict[str, str],
        on_done: Callable[[StreamStats], Awaitable[None]],
        watch: DisconnectWatch | None = None,
    ) -> None:
        self.stats = stats
        self._body = body
        self._on_done = on_done
        self._watch = watch  # the request's own, handed over by the proxy
        super().__init__(body, status_code=200, headers=headers, media_type="text/event-stream")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch = self._watch if self._watch is not None else DisconnectWatch(receive)
        try:
            with watch.guard():
                await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                async for block in self._body:
                    await send({"type": "http.response.body", "body": block, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (ClientGone, OSError):
            # a client that leaves after [DONE] (as many do) got the whole answer
            self.stats.client_gone = not self.stats.completed
        finally:
            watch.stop()
            if not self.stats.completed and self.stats.error is None:
                self.stats.client_gone = True
            with anyio.CancelScope(shield=True):
                await self._body.aclose()
                await self._on_done(self.stats)
