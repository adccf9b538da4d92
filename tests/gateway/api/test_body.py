"""Reading a request body: bounded in size, declared or not, and in time; the rest of a
refused body read and thrown away (up to as much again) so the client sees the 413."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.api.body import drain, read_body
from gateway.errors import GatewayError
from gateway.request.disconnect import ClientGone


class Messages:
    """An ASGI ``receive`` that hands out the given messages, then blocks; counts reads."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self._messages = list(messages)
        self.read = 0

    async def __call__(self) -> dict[str, Any]:
        if self.read < len(self._messages):
            self.read += 1
            return self._messages[self.read - 1]
        await asyncio.Event().wait()  # a client that sends nothing more
        raise AssertionError("unreachable")


def part(body: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


async def test_a_body_in_parts_comes_back_whole() -> None:
    receive = Messages(part(b'{"a":'), part(b" 1"), part(b"}", more=False))
    assert await read_body(receive, {}, limit=100, timeout_s=5) == b'{"a": 1}'


async def test_a_body_of_exactly_the_limit_is_accepted() -> None:
    receive = Messages(part(b"x" * 10, more=False))
    assert await read_body(receive, {"content-length": "10"}, limit=10, timeout_s=5) == b"x" * 10


async def test_a_declared_length_over_the_limit_is_refused_after_reading_the_rest() -> None:
    receive = Messages(part(b"x" * 8), part(b"x" * 7, more=False))
    with pytest.raises(GatewayError) as caught:
        await read_body(receive, {"content-length": "15"}, limit=10, timeout_s=5)
    assert caught.value.status == 413 and caught.value.code == "payload_too_large"
    assert receive.read == 2  # drained, so the client sees the answer rather than a reset


async def test_a_declared_length_far_over_the_limit_is_not_waited_for() -> None:
    receive = Messages(part(b"x" * 8))
    with pytest.raises(GatewayError) as caught:
        await read_body(receive, {"content-length": "1000"}, limit=10, timeout_s=5)
    assert caught.value.status == 413 and receive.read == 0


async def test_an_undeclared_body_over_the_limit_is_refused_and_drained_up_to_the_limit_again() -> None:
    receive = Messages(part(b"x" * 6), part(b"x" * 6), part(b"x" * 6), part(b"x" * 6), part(b"x" * 6))
    with pytest.raises(GatewayError) as caught:
        await read_body(receive, {}, limit=10, timeout_s=5)
    assert caught.value.status == 413
    assert receive.read == 4  # two to pass the limit, then 10 bytes' worth more (two parts), no further


async def test_a_body_that_does_not_come_is_a_408() -> None:
    receive = Messages(part(b"{"))
    with pytest.raises(GatewayError) as caught:
        await read_body(receive, {}, limit=100, timeout_s=0.01)
    assert caught.value.status == 408 and caught.value.code == "request_timeout"


async def test_a_client_that_leaves_mid_body_is_gone() -> None:
    receive = Messages(part(b"{"), {"type": "http.disconnect"})
    with pytest.raises(ClientGone):
        await read_body(receive, {}, limit=100, timeout_s=5)


async def test_drain_stops_at_the_end_of_the_body_or_a_disconnect() -> None:
    ended = Messages(part(b"abc"), part(b"d", more=False), part(b"never read"))
    await drain(ended, budget=100, timeout_s=5)
    assert ended.read == 2
    left = Messages(part(b"abc"), {"type": "http.disconnect"}, part(b"never read"))
    await drain(left, budget=100, timeout_s=5)
    assert left.read == 2

