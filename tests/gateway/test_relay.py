"""The SSE relay, chunk by chunk: whole events out, the usage chunk read and stripped
when the client did not ask for it, a break mid-stream turned into an SSE error."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import sse
from gateway.request.relay import relay_events
from gateway.telemetry.stream_stats import StreamStats

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


# -- every framing the SSE spec allows ---------------------------------------------------


def framed(stream: bytes, eol: bytes, space: bool = True) -> bytes:
    """``stream`` (LF-framed) rewritten with other line ends and/or ``data:`` without the space."""
    out = stream if space else stream.replace(b"data: ", b"data:")
    return out.replace(b"\n", eol)


class Counted(httpx.AsyncByteStream):
    """Chunks that count how many reads the relay has made."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.pulled = chunks, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.pulled += 1
            yield chunk


FRAMINGS = [(b"\n", True), (b"\n", False), (b"\r\n", True), (b"\r\n", False), (b"\r", True)]


@pytest.mark.parametrize(("eol", "space"), FRAMINGS)
async def test_the_first_event_goes_out_as_soon_as_it_came(eol: bytes, space: bool) -> None:
    first, rest = framed(ROLE + HELLO, eol, space), framed(FINISH + DONE, eol, space)
    stream = Counted([first, rest])
    relay = relay_events(httpx.Response(200, stream=stream), False, StreamStats())
    assert await anext(relay) == first
    assert stream.pulled == 1  # out before the next read
    assert b"".join([block async for block in relay]) == rest


@pytest.mark.parametrize(("eol", "space"), FRAMINGS)
@pytest.mark.parametrize("size", [1, 5, 10_000])
async def test_usage_is_read_and_its_chunk_stripped_in_every_framing(eol: bytes, space: bool, size: int) -> None:
    stream = framed(ROLE + HELLO + USAGE_ONLY + DONE, eol, space)
    blocks, stats = await relay(split_everywhere(stream, size))
    assert b"".join(blocks) == framed(ROLE + HELLO + DONE, eol, space)
    assert stats.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert stats.completed and stats.events == 2 and stats.first_chunk_at is not None
    kept, _ = await relay(split_everywhere(stream, size), keep_usage=True)
    assert b"".join(kept) == stream


async def test_usage_split_over_data_lines_is_read() -> None:
    usage = b'data: {"choices":[],\ndata: "usage":{"completion_tokens":4}}\n\n'
    blocks, stats = await relay([HELLO + usage + DONE])
    assert b"".join(blocks) == HELLO + DONE
    assert stats.usage == {"completion_tokens": 4}


TOOL_CALL = (b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function",'
             b'"function":{"name":"get_weather","arguments":""}}]}}]}\n\n')


async def test_a_stream_of_tool_calls_only_records_its_first_token() -> None:
    _, stats = await relay([ROLE, TOOL_CALL, FINISH, DONE])
    assert stats.first_chunk_at is not None


@pytest.mark.parametrize(("eol", "space"), FRAMINGS)
async def test_a_trailer_goes_out_just_before_done(eol: bytes, space: bool) -> None:
    stream = framed(ROLE + HELLO + DONE, eol, space)
    response = httpx.Response(200, stream=Chunks([stream]))
    out = b"".join([b async for b in relay_events(response, False, StreamStats(), b": q=1\n\n")])
    done = framed(DONE, eol, space)
    assert out == stream[: -len(done)] + b": q=1\n\n" + done


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(FRAMINGS), st.lists(st.integers(1, 60), min_size=1, max_size=40), st.booleans())
async def test_any_split_of_any_framing_relays_the_same_bytes(
    framing: tuple[bytes, bool], sizes: list[int], keep: bool
) -> None:
    eol, space = framing
    stream = framed(ROLE + HELLO + TOOL_CALL + FINISH + USAGE_ONLY + DONE, eol, space)
    chunks, pos = [], 0
    for size in sizes:
        chunks.append(stream[pos : pos + size])
        pos += size
    chunks.append(stream[pos:])
    blocks, stats = await relay([c for c in chunks if c], keep_usage=keep)
    want = stream if keep else framed(ROLE + HELLO + TOOL_CALL + FINISH + DONE, eol, space)
    assert b"".join(blocks) == want
    # each block holds whole events (or is the LF of a CRLF whose CR ended the last one)
    assert all(sse.event_end(block) or not block.strip(b"\r\n") for block in blocks)
    assert stats.usage is not None and stats.completed and stats.events == 5 - (not keep)


# vLLM stamps its fingerprint on a stream's last chunk: the usage chunk when usage was asked
# for (as the gateway always asks), the finish chunk when it was not
FP = b'"system_fingerprint":"vllm-0.32.0-aca2e370"'
FINISH_BARE = b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
FINISH_STAMPED = b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"length"}],' + FP + b"}\n\n"
USAGE_STAMPED = (b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},'
                 + FP + b"}\n\n")


@pytest.mark.parametrize("size", [1, 5, 64, len(FINISH_BARE), len(FINISH_BARE) + 3, 10_000])
async def test_the_fingerprint_of_a_stripped_usage_chunk_goes_to_the_finish_chunk(size: int) -> None:
    stream = ROLE + HELLO + FINISH_BARE + USAGE_STAMPED + DONE
    blocks, stats = await relay(split_everywhere(stream, size))
    assert b"".join(blocks) == ROLE + HELLO + FINISH_STAMPED + DONE  # what vLLM sends a client that did not ask
    assert stats.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    blocks, _ = await relay(split_everywhere(stream, size), keep_usage=True)
    assert b"".join(blocks) == stream  # asked for: as the engine sent it


async def test_a_finish_chunk_without_a_usage_chunk_after_it_goes_out_as_it_came() -> None:
    blocks, _ = await relay([ROLE + FINISH_BARE, DONE])
    assert b"".join(blocks) == ROLE + FINISH_BARE + DONE
    blocks, stats = await relay([ROLE + FINISH_BARE])  # the stream ends there
    assert b"".join(blocks) == ROLE + FINISH_BARE and stats.completed
