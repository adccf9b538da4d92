"""Reading a request body: bounded in size (declared or chunked) and in time.

A body over the limit is answered with a 413 at once, but first the rest of it is read
and thrown away, up to as much again as the limit: a server that closes a connection
with request bytes still unread makes the kernel answer with a reset, and the client
may then never see the 413. A larger body is not waited for (its client may get the
reset). A body that does not arrive within ``timeout_s`` of the head gets a 408. Both
answers close the connection (``CLOSE``): what remains of the body is never parsed as
a next request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from starlette.types import Receive

from gateway.errors import GatewayError
from gateway.request.disconnect import ClientGone

CLOSE = {"connection": "close"}  # headers of an answer after which the connection is closed
DRAIN_TIME_S = 5.0  # at most this long spent reading the rest of a refused body


def too_large(limit: int) -> GatewayError:
    return GatewayError(413, f"The request body is larger than {limit} bytes.", code="payload_too_large")


def _declared(headers: Mapping[str, str]) -> int | None:
    value = headers.get("content-length")
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


async def drain(receive: Receive, budget: int, timeout_s: float) -> None:
    """Read and discard up to ``budget`` bytes of the body, for at most ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            while budget > 0:
                message = await receive()
                if message["type"] != "http.request":
                    return
                budget -= len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
    except TimeoutError:
        return


async def read_body(receive: Receive, headers: Mapping[str, str], limit: int, timeout_s: float) -> bytes:
    """The whole body; ``GatewayError`` 413 or 408, ``ClientGone`` if the client left."""
    declared = _declared(headers)
    if declared is not None and declared > limit:
        if declared <= 2 * limit:
            await drain(receive, declared, min(timeout_s, DRAIN_TIME_S))
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    more = True
    try:
        async with asyncio.timeout(timeout_s):
            while more and size <= limit:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone()
                chunk = message.get("body", b"")
                size += len(chunk)
                more = bool(message.get("more_body", False))
                chunks.append(chunk)
    except TimeoutError:
        raise GatewayError(
            408, f"The request body did not arrive within {timeout_s:g} s.", code="request_timeout"
        ) from None
    if size > limit:
        if more:
            await drain(receive, limit, min(timeout_s, DRAIN_TIME_S))
        raise too_large(limit)
    return b"".join(chunks)
