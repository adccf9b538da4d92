"""Server-sent events as the WHATWG spec defines them (HTML, "Server-sent events", §9.2.6).

A stream is UTF-8 text in lines ended by CRLF, LF or CR; a blank line ends an event.
A line that starts with ``:`` is a comment; otherwise it is ``field: value`` (one
space after the colon is dropped, none is needed) or a bare field name. ``data``
lines add to the event's data (joined by LF), ``event`` names its type, ``id`` sets
the last event id, ``retry`` the reconnection time; other fields are ignored. An
event with no data is not dispatched.

Servers differ: vLLM writes ``data: {...}\\n\\n``, TGI ``data:{...}\\n\\n``, and
sse-starlette (llama-cpp-python) ``data: {...}\\r\\n\\r\\n``. The relay
(``relay.py``) cuts a stream at event ends (``event_end``) without decoding it and
parses, with ``Parser``, only the events it must read.

Writing is here too, once: ``comment``, ``data``, ``error`` and ``DONE`` are the only
ways the gateway puts an event of its own on a client's stream.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from gateway.errors import error_body

# one line end (a CR followed by LF is one), then another: a blank line, an event's end
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Event:
    data: str
    type: str = "message"
    id: str = ""  # the last event id when it was dispatched
    retry_ms: int | None = None  # the last reconnection time the stream set


def event_end(data: bytes) -> int:
    """Where the last complete event in ``data`` ends (0: none yet). A CR at the very
    end ends a line even if an LF follows in the next read: that LF is then a line
    end of its own only to a parser that lost track (``Parser`` does not)."""
    end = 0
    for match in _EVENT_END.finditer(data):
        end = match.end()
    return end


def split_events(block: bytes) -> list[bytes]:
    """The events of a block that ends at an event's end, each with its line ends."""
    out, start = [], 0
    for match in _EVENT_END.finditer(block):
        out.append(block[start : match.end()])
        start = match.end()
    if start < len(block):
        out.append(block[start:])
    return out


class Parser:
    """An incremental SSE parser: ``feed`` bytes as they come, get the events they complete."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line = ""  # text after the last line end
        self._after_cr = False  # the last text ended with CR: an LF first is part of that line end
        self._started = False  # a leading BOM is dropped, once
        self._data: list[str] = []
        self._type = ""
        self._id = ""
        self._retry: int | None = None
        self.comments: list[str] = []  # comment lines seen (without the colon), for callers that care

    def feed(self, chunk: bytes) -> list[Event]:
        text = self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        if text:  # (none: the decoder holds part of a character; the line end state stays)
            if self._after_cr and text.startswith("\n"):
                text = text[1:]  # the LF of a CR LF split between reads
            self._after_cr = text.endswith("\r")
        events: list[Event] = []
        pos = 0
        buf = self._line + text
        for match in _LINE_END.finditer(buf):  # a CR at the end ends its line: see _after_cr
            event = self._line_done(buf[pos : match.start()])
            if event is not None:
                events.append(event)
            pos = match.end()
        self._line = buf[pos:]
        return events

    def _line_done(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            self.comments.append(line[1:])
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._type = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> Event | None:
        data, type_ = self._data, self._type
        self._data, self._type = [], ""
        if not data:
            return None
        return Event("\n".join(data), type_ or "message", self._id, self._retry)


def parse(raw: bytes) -> list[Event]:
    """Every event in ``raw``, complete ones only."""
    return Parser().feed(raw)


# -- writing ---------------------------------------------------------------------------
DONE = b"data: [DONE]\n\n"


def comment(text: str) -> bytes:
    """A comment line as one event: clients ignore it; it keeps the stream (and proxies) awake."""
    return b": " + text.encode() + b"\n\n"


def data(payload: bytes) -> bytes:
    """One data event carrying ``payload`` (one line of JSON)."""
    return b"data: " + payload + b"\n\n"


def error(message: str, type_: str, code: str | None = None) -> bytes:
    """An OpenAI-style error as one data event: the SDKs raise it as an API error."""
    return data(error_body(message, type_, code))
