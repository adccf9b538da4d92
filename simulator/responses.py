"""Delivering one sequence to its client, streamed or whole, and noticing when the client leaves.

Client disconnect aborts the sequence, like vLLM: its batch slot and KV are freed at
once and it is counted with ``finished_reason="abort"``. Uvicorn (ASGI spec 2.3) drops
writes to a closed connection silently, so writing alone cannot reveal a disconnect;
and a request still queued inside the engine writes nothing at all. So each request has
a watcher task that reads ``receive()`` until ``http.disconnect``, as Starlette's
``StreamingResponse`` does. Once the request body is read, that message is the only
thing ``receive()`` can still return.
"""

from __future__ import annotations

import asyncio

from starlette.types import Receive, Scope, Send

from simulator.encoding import StreamFrames
from simulator.engine import Engine
from simulator.faults import InjectedDrop
from simulator.protocol import FinishReason
from simulator.sequence import Sequence

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


async def abort_on_disconnect(receive: Receive, engine: Engine, *seqs: Sequence) -> None:
    """Abort ``seqs`` when the client disconnects. Cancel this task once the response is done."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            for seq in seqs:
                engine.abort(seq)
            return


async def wait_finished(receive: Receive, engine: Engine, *seqs: Sequence) -> None:
    """Until every one of ``seqs`` (a request's choices) ends by itself or because the
    client left (non-streamed requests)."""
    watcher = asyncio.create_task(abort_on_disconnect(receive, engine, *seqs))
    try:
        for seq in seqs:
            while not seq.finished:
                await seq.wait()
    except asyncio.CancelledError:
        for seq in seqs:
            engine.abort(seq)
        raise
    finally:
        watcher.cancel()


class DroppedResponse:
    """Starts a response, then breaks the connection (the ``drop_after_tokens`` fault)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"4096")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"id":', "more_body": True})
        raise InjectedDrop("connection dropped by injected fault")


class TokenStream:
    """ASGI response that streams a sequence's tokens as SSE frames as the engine makes them."""

    def __init__(
        self, engine: Engine, seq: Sequence, writer: StreamFrames, include_usage: bool, usage_on_last: bool = False,
    ) -> None:
        self._engine = engine
        self._seq = seq
        self._writer = writer
        self._include_usage = include_usage
        self._usage_on_last = usage_on_last  # the finish frame carries the usage (TGI)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        engine, seq, writer = self._engine, self._seq, self._writer
        watcher = asyncio.create_task(abort_on_disconnect(receive, engine, seq))
        try:
            # Headers go out at once; the role frame waits for the first token, as in vLLM.
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            limit = seq.drop_after
            sent = 0
            started = False
            while True:
                await seq.wait()
                if seq.finish_reason is FinishReason.ABORT and not seq.dropped:
                    return  # the client left or the server is stopping: nobody to write to
                n = seq.generated if limit is None else min(seq.generated, limit)
                parts: list[bytes] = []
                if not started and (n > 0 or seq.finished):
                    parts.append(writer.role())
                    started = True
                if seq.dropped:
                    if body := b"".join(parts) + writer.tokens(sent, n):
                        await send({"type": "http.response.body", "body": body, "more_body": True})
                    raise InjectedDrop("stream dropped by injected fault")
                if seq.finished:
                    assert seq.finish_reason is not None
                    counts = (seq.prompt_tokens, seq.generated)
                    on_last = self._include_usage and self._usage_on_last
                    parts.append(writer.end(sent, n, seq.finish_reason, counts if on_last else None))
                    if self._include_usage and not on_last:
                        parts.append(writer.usage(*counts))
                    parts.append(writer.done)
                    await send({"type": "http.response.body", "body": b"".join(parts), "more_body": False})
                    return
                if n > sent:
                    parts.append(writer.tokens(sent, n))
                    sent = n
                if parts:
                    await send({"type": "http.response.body", "body": b"".join(parts), "more_body": True})
        except asyncio.CancelledError:
            engine.abort(seq)
            raise
        finally:
            watcher.cancel()
