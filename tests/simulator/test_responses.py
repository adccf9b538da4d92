"""Delivering a sequence to its client, in process: ``TokenStream`` sends frames as the
engine makes tokens, and a client that leaves aborts the sequence (vLLM's way), streamed
or not; ``DroppedResponse`` breaks the connection mid-answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from simulator.encoding import DONE_FRAME, FrameWriter, StreamSpec
from simulator.engine import Engine
from simulator.faults import InjectedDrop
from simulator.metrics import Metrics
from simulator.profiles import FAST
from simulator.protocol import Endpoint, FinishReason
from simulator.responses import DroppedResponse, TokenStream, wait_finished
from simulator.sequence import Sequence
from simulator.textgen import Vocabulary

VOCAB = Vocabulary()


class Client:
    """``receive`` blocks until ``leave()``; ``send`` collects."""

    def __init__(self) -> None:
        self.left = asyncio.Event()
        self.messages: list[dict[str, Any]] = []
        self.got_body = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        if message.get("body"):
            self.got_body.set()

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    e = Engine(FAST, Metrics("m"))
    e.start()
    yield e
    await e.stop()


def writer(include_usage: bool) -> FrameWriter:
    return FrameWriter(StreamSpec(Endpoint.CHAT, "id", 1, "m", include_usage, VOCAB, 0))


@pytest.mark.parametrize(("include_usage", "on_last"), [(False, False), (True, False), (True, True)])
async def test_a_stream_sends_every_token_then_its_end(engine: Engine, include_usage: bool, on_last: bool) -> None:
    seq = Sequence(8, 6, FinishReason.STOP, streamed=True, arrival=engine.now())
    engine.submit(seq)
    client = Client()
    w = writer(include_usage)
    await TokenStream(engine, seq, w, include_usage, usage_on_last=on_last)({}, client.receive, client.send)

    start = client.messages[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert client.messages[-1]["more_body"] is False
    usage = (8, 6)
    tail = w.finish(FinishReason.STOP, usage if on_last else None)
    if include_usage and not on_last:
        tail += w.usage(*usage)
    assert client.body == w.role() + w.tokens(0, 6) + tail + DONE_FRAME


async def test_a_client_leaving_mid_stream_aborts_its_sequence(engine: Engine) -> None:
    seq = Sequence(8, 100_000, FinishReason.STOP, streamed=True, arrival=engine.now())
    engine.submit(seq)
    client = Client()
    stream = asyncio.ensure_future(TokenStream(engine, seq, writer(False), False)({}, client.receive, client.send))
    await client.got_body.wait()
    client.left.set()
    await stream

    assert seq.finish_reason is FinishReason.ABORT
    assert engine.metrics.finished[FinishReason.ABORT] == 1
    assert client.messages[-1].get("more_body", True)  # no end was written to nobody


async def test_a_whole_answer_waits_for_every_choice_or_aborts_them_all(engine: Engine) -> None:
    done = [Sequence(4, 3, FinishReason.STOP, streamed=False, arrival=engine.now()) for _ in range(2)]
    for s in done:
        engine.submit(s)
    await wait_finished(Client().receive, engine, *done)
    assert all(s.finish_reason is FinishReason.STOP for s in done)

    long = [Sequence(4, 100_000, FinishReason.STOP, streamed=False, arrival=engine.now()) for _ in range(2)]
    for s in long:
        engine.submit(s)
    client = Client()
    client.left.set()  # the client is gone
    await wait_finished(client.receive, engine, *long)
    assert all(s.finish_reason is FinishReason.ABORT for s in long)


async def test_a_dropped_response_starts_then_breaks() -> None:
    client = Client()
    with pytest.raises(InjectedDrop):
        await DroppedResponse()({}, client.receive, client.send)
    start, body = client.messages
    assert start["status"] == 200 and dict(start["headers"])[b"content-length"] == b"4096"
    assert body["more_body"] is True and len(body["body"]) < 4096  # less than it promised
