"""One HTTP/1.1 connection to a backend, and the message heads it carries.

``Conn`` wraps an asyncio stream pair with a read deadline checked by a lazy timer;
``encode_head`` writes an ``httpx.Request``'s head, ``encode_post`` a POST's head from its
parts (the direct path, ``client.py``), ``parse_head`` reads a response head. Failures
are httpx's own exceptions (see ``transport.py``); ``Stale`` and ``TimedOut`` are the
transport's private signals.
"""

from __future__ import annotations

import asyncio

import httpx

HEAD_END = b"\r\n\r\n"
READ_SIZE = 65536
MAX_HEAD = 65536


class Stale(Exception):
    """A reused connection was closed by the server before answering."""


class TimedOut(Exception):
    """Set on a connection's reader by its read watchdog."""


class Conn:
    """One TCP connection, with a read deadline checked by a lazy timer (not one per read)."""

    __slots__ = ("reader", "writer", "idle_since", "_loop", "_deadline", "_timer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0
        self._loop = asyncio.get_running_loop()
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def alive(self) -> bool:
        return not self.reader.at_eof() and not self.writer.transport.is_closing()

    async def read(self, limit_s: float | None, request: httpx.Request | None) -> bytes:
        """Whatever has arrived, up to 64 KiB; b"" at the end of the connection."""
        if limit_s is not None:
            self._arm(limit_s)
        try:
            return await self.reader.read(READ_SIZE)
        except TimedOut:
            raise httpx.ReadTimeout("timed out waiting for the backend", request=request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or exc.__class__.__name__, request=request) from exc
        finally:
            self._deadline = None

    async def read_head(self, limit_s: float | None, request: httpx.Request | None) -> bytes:
        if limit_s is not None:
            self._arm(limit_s)
        try:
            return await self.reader.readuntil(HEAD_END)
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise Stale() from None
            raise httpx.RemoteProtocolError("the backend closed the connection mid-answer", request=request) from None
        except asyncio.LimitOverrunError:
            raise httpx.RemoteProtocolError("response head too large", request=request) from None
        except TimedOut:
            raise httpx.ReadTimeout("timed out waiting for the backend", request=request) from None
        except ConnectionResetError:
            raise Stale() from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or exc.__class__.__name__, request=request) from exc
        finally:
            self._deadline = None

    def _arm(self, timeout: float) -> None:
        """Time out the coming read ``timeout`` from now. A pending timer for a later
        deadline (an earlier, longer read) is moved earlier; one already earlier re-arms
        itself when it fires."""
        self._deadline = self._loop.time() + timeout
        if self._timer is not None and self._timer.when() > self._deadline:
            self._timer.cancel()
            self._timer = None
        if self._timer is None:
            self._timer = self._loop.call_at(self._deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._deadline is None:  # not reading now: the next read re-arms
            return
        if self._loop.time() >= self._deadline:
            self.reader.set_exception(TimedOut())
        else:
            self._timer = self._loop.call_at(self._deadline, self._check)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.writer.close()


def encode_head(request: httpx.Request, body_len: int) -> bytes:
    parts = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    has_length = False
    for name, value in request.headers.raw:
        lower = name.lower()
        if lower == b"content-length":
            has_length = True
        elif lower == b"transfer-encoding":
            continue  # the body is sent whole, with its length
        parts += (name, b": ", value, b"\r\n")
    if not has_length and (body_len or request.method not in ("GET", "HEAD")):
        parts.append(b"content-length: %d\r\n" % body_len)
    parts.append(b"\r\n")
    return b"".join(parts)


# what every request on the direct path says besides its own headers: the body is never
# compressed (it is relayed as it comes), the connection is kept
FIXED_HEADERS = b"accept: */*\r\naccept-encoding: identity\r\nconnection: keep-alive\r\nuser-agent: triage\r\n"


def encode_post(target: bytes, host: bytes, headers: dict[str, str], body_len: int) -> bytes:
    """A POST's head: ``target`` (the path and query, as sent), ``host`` (the Host header's
    value), ``headers`` (lower-case names; no Host, Content-Length or Transfer-Encoding).
    A name or value that could split the head is refused (``httpx.LocalProtocolError``)."""
    parts = [b"POST ", target, b" HTTP/1.1\r\nhost: ", host, b"\r\n", FIXED_HEADERS]
    for name, value in headers.items():
        line = f"{name}: {value}\r\n"
        if "\r" in line[:-2] or "\n" in line[:-2]:
            raise httpx.LocalProtocolError(f"a line break in the {name!r} header")
        parts.append(line.encode("latin-1"))
    parts.append(b"content-length: %d\r\n\r\n" % body_len)
    return b"".join(parts)


def parse_head(head: bytes, request: httpx.Request | None) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    lines = head[:-4].split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1.") or not status_line[1].isdigit():
        raise httpx.RemoteProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}", request=request)
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise httpx.RemoteProtocolError(f"malformed header line: {line[:80]!r}", request=request)
        headers.append((name, value.strip()))
    version = status_line[0]
    reason = status_line[2] if len(status_line) > 2 else b""
    return int(status_line[1]), version + b"\x00" + reason, headers
