"""HTTP/1.1 over a bare asyncio socket: the request goes out exactly as given.

``exchange`` sends bytes (all at once, or trickled), reads one reply (by
``content-length``, chunked, or to end of file) and says how it ended: a reply, the
server closing without one, a reset, or no answer within the bound (a hang).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import orjson


@dataclass(slots=True)
class Reply:
    status: int | None = None  # None: no status line came back
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    ending: str = "reply"  # reply | closed (no reply) | reset | hang
    elapsed_s: float = 0.0

    def error(self) -> dict[str, object] | None:
        """The OpenAI-style ``error`` object of the body, or None if it is not one."""
        try:
            data = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str) and isinstance(err.get("type"), str):
            if "param" in err and "code" in err:
                return err
        return None


async def read_reply(reader: asyncio.StreamReader, reply: Reply, head_only: bool = False) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    reply.status = int(lines[0].split(" ")[1])
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            reply.headers[name.strip().lower()] = value.strip()
    if head_only or reply.status in (204, 304):
        return
    if reply.headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        reply.body = b"".join(parts)
    elif "content-length" in reply.headers:
        reply.body = await reader.readexactly(int(reply.headers["content-length"]))
    else:
        reply.body = await reader.read()


async def _trickle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes, every_s: float, reply: Reply
) -> None:
    """One byte every ``every_s`` while reading the reply; the server may answer early."""
    reading = asyncio.ensure_future(read_reply(reader, reply))
    try:
        for i in range(len(payload)):
            if reading.done():
                break
            try:
                writer.write(payload[i:i + 1])
                await writer.drain()
            except (ConnectionResetError, BrokenPipeError):
                break
            await asyncio.wait({reading}, timeout=every_s)
        await reading
    finally:
        reading.cancel()


async def exchange(
    host: str, port: int, payload: bytes, timeout_s: float = 30.0,
    trickle_s: float | None = None, close_after_s: float | None = None, trickle_from: int = 0,
) -> Reply:
    """Send ``payload`` (``trickle_s``: one byte every so often, after the first
    ``trickle_from`` bytes at once) and read one reply.

    ``close_after_s``: the client itself hangs up this long after sending (a storm)."""
    reply = Reply()
    started = time.monotonic()
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port, limit=1 << 24)
            if trickle_s is None:
                writer.write(payload)
                await writer.drain()
            else:
                writer.write(payload[:trickle_from])
                await _trickle(reader, writer, payload[trickle_from:], trickle_s, reply)
                return reply
            if close_after_s is not None:
                await asyncio.sleep(close_after_s)
                reply.ending = "client_closed"
                return reply
            await read_reply(reader, reply, payload.startswith(b"HEAD "))
    except TimeoutError:
        reply.ending = "hang"
    except (ConnectionResetError, BrokenPipeError):
        reply.ending = "reset"
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError):
        reply.ending = "closed" if reply.status is None else "truncated"
    finally:
        reply.elapsed_s = time.monotonic() - started
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass
    return reply


def request(
    method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
    host: str = "127.0.0.1", close: bool = True,
) -> bytes:
    """A well-formed request's bytes (the fuzzer breaks them on purpose elsewhere)."""
    lines = [f"{method} {path} HTTP/1.1", f"host: {host}"]
    all_headers = {"content-type": "application/json", **(headers or {})}
    if body or method in ("POST", "PUT", "PATCH"):
        all_headers.setdefault("content-length", str(len(body)))
    if close:
        all_headers.setdefault("connection", "close")
    lines += [f"{k}: {v}" for k, v in all_headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
