"""The SSE relay, chunk by chunk: whole events out, the usage chunk read and stripped
when the client did not ask for it, a break mid-stream turned into an SSE error."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from gateway.relay import StreamStats, relay_events

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
HELLO = b'data: {"choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n'
FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
USAGE_ONLY = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'
USAGE_ON_CONTENT = b'data: {"choices":[{"index":0,"delta":{"content":"!"}}],"usage":{"completion_tokens":2}}\n\n'
DONE = b"data: [DONE]\n\n"


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes], then_break: bool = False) -> None:
        self._chunks, self._break = chunks, then_break

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        if self._break:
            raise httpx.ReadError("connection reset")


async def relay(chunks: list[bytes], keep_usage: bool = False, then_break: bool = False) -> tuple[list[bytes], StreamStats]:
    response = httpx.Response(200, stream=Chunks(chunks, then_break))
    stats = StreamStats()
    blocks = [block async for block in relay_events(response, keep_usage, stats)]
    return blocks, stats


def split_everywhere(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
async def test_events_split_anywhere_come_out_whole_and_unchanged(size: int) -> None:
    stream = ROLE + HELLO + FINISH + DONE
    blocks, stats = await relay(split_everywhere(stream, size))
    assert b"".join(blocks) == stream
    assert all(block.endswith(b"\n\n") for block in blocks)  # never half an event
    assert stats.completed and stats.error is None and stats.events == 3


@pytest.mark.parametrize(
    ("case", "stream", "keep", "out", "usage"),
    [
        ("usage-only chunk stripped", ROLE + HELLO + USAGE_ONLY + DONE, False, ROLE + HELLO + DONE, 2),
        ("usage-only chunk kept when asked", ROLE + HELLO + USAGE_ONLY + DONE, True,
         ROLE + HELLO + USAGE_ONLY + DONE, 2),
        ("usage on a content chunk stays (TGI's way)", HELLO + USAGE_ON_CONTENT + DONE, False,
         HELLO + USAGE_ON_CONTENT + DONE, 2),
        ("no usage at all", ROLE + HELLO + DONE, False, ROLE + HELLO + DONE, None),
    ],
)
async def test_usage(case: str, stream: bytes, keep: bool, out: bytes, usage: int | None) -> None:
    blocks, stats = await relay([stream], keep_usage=keep)
    assert b"".join(blocks) == out, case
    assert (stats.usage or {}).get("completion_tokens") == usage, case


async def test_the_first_token_is_the_first_content_not_the_role() -> None:
    _, stats = await relay([ROLE])
    assert stats.first_chunk_at is None
    _, stats = await relay([ROLE, HELLO])
    assert stats.first_chunk_at is not None


async def test_a_break_mid_stream_ends_with_an_sse_error() -> None:
    blocks, stats = await relay([ROLE + HELLO], then_break=True)
    assert blocks[0] == ROLE + HELLO
    error = orjson.loads(blocks[-1].removeprefix(b"data: "))["error"]
    assert error["code"] == "stream_broken" and error["type"] == "upstream_error"
    assert stats.error is not None and not stats.completed


async def test_an_unterminated_tail_is_passed_on() -> None:
    blocks, stats = await relay([HELLO + b'data: {"partial"'])
    assert b"".join(blocks) == HELLO + b'data: {"partial"'
    assert stats.completed
