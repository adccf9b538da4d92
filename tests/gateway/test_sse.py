"""The SSE parser against the spec's rules (table), and against itself: any split of a
stream into reads gives the same events (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sse import Event, Parser, event_end, parse, split_events


@pytest.mark.parametrize(
    ("case", "raw", "events"),
    [
        ("LF framing, space after the colon", b"data: a\n\n", [Event("a")]),
        ("no space after the colon (TGI)", b"data:a\n\n", [Event("a")]),
        ("only the first space is dropped", b"data:  a\n\n", [Event(" a")]),
        ("CRLF framing (sse-starlette)", b"data: a\r\n\r\ndata: b\r\n\r\n", [Event("a"), Event("b")]),
        ("bare CR line ends", b"data: a\r\rdata: b\r\r", [Event("a"), Event("b")]),
        ("mixed line ends", b"data: a\r\n\ndata: b\n\r\n", [Event("a"), Event("b")]),
        ("multi-line data joins with LF", b"data: {\"a\":\ndata: 1}\n\n", [Event('{"a":\n1}')]),
        ("comments are not events", b": ping\n\n: queued\ndata: a\n\n", [Event("a")]),
        ("event type", b"event: error\ndata: x\n\ndata: y\n\n", [Event("x", "error"), Event("y")]),
        ("id persists; NUL in an id is ignored", b"id: 7\ndata: a\n\nid: 8\0\ndata: b\n\n",
         [Event("a", id="7"), Event("b", id="7")]),
        ("retry", b"retry: 1500\ndata: a\n\n", [Event("a", retry_ms=1500)]),
        ("a bare field name is an empty value", b"data\ndata\n\n", [Event("\n")]),
        ("unknown fields are ignored", b"foo: bar\ndata: a\n\n", [Event("a")]),
        ("no data, no event", b"event: x\n\nid: 3\n\n", []),
        ("an unterminated event is not dispatched", b"data: a\n\ndata: b\n", [Event("a")]),
        ("a leading BOM is dropped", "\ufeffdata: a\n\n".encode(), [Event("a")]),
        ("UTF-8", "data: héllo ✓\n\n".encode(), [Event("héllo ✓")]),
        ("[DONE]", b"data: [DONE]\n\n", [Event("[DONE]")]),
    ],
)
def test_parse(case: str, raw: bytes, events: list[Event]) -> None:
    assert parse(raw) == events, case


@pytest.mark.parametrize(
    ("raw", "end"),
    [
        (b"data: a\n", 0),
        (b"data: a\n\n", 9),
        (b"data: a\r\n\r\n", 11),
        (b"data: a\r\n\r\ndata: b\r\n", 11),
        (b"data: a\r\n", 0),  # one line end, however it is split
        (b"data: a\r", 0),
        (b"data: a\r\r", 9),
        (b"data: a\r\n\r", 10),  # the blank line is complete; a following LF belongs to it
        (b"data: a\n\ndata: b\n\n", 18),
    ],
)
def test_event_end(raw: bytes, end: int) -> None:
    assert event_end(raw) == end


def test_split_events_keeps_every_byte() -> None:
    block = b"data: a\r\n\r\n: c\n\ndata: b\r\r"
    parts = split_events(block)
    assert b"".join(parts) == block
    assert parts == [b"data: a\r\n\r\n", b": c\n\n", b"data: b\r\r"]


# -- any split of any stream gives the same events ------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\0"), max_size=12)
_eol = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[Event]]:
    """A stream written in random framings, and the events it must give."""
    out, events, last_id = [], [], ""
    for _ in range(draw(st.integers(0, 6))):
        lines: list[str] = []
        if draw(st.booleans()):
            lines.append(":" + draw(_text))  # a comment
        type_ = draw(st.sampled_from(["", "message", "error"]))
        if type_:
            lines.append(f"event: {type_}")
        if draw(st.booleans()):
            last_id = draw(st.text(st.characters(whitelist_categories=("L", "N")), max_size=4))
            lines.append(f"id: {last_id}")
        data = draw(st.lists(_text, min_size=1, max_size=3))
        space = draw(st.sampled_from(["", " "]))
        lines += [f"data:{space}{d}" if not d.startswith(" ") or space else f"data: {d}" for d in data]
        prev = ""
        for line in [*lines, ""]:  # the blank line ends the event
            eol = draw(_eol)
            if prev == "\r" and eol == "\n" and not line:
                eol = "\r\n"  # CR then LF would be one line end, not two
            out.append(line + eol)
            prev = eol
        events.append(Event("\n".join(data), type_ or "message", last_id))
    return "".join(out).encode(), events


def test_a_crlf_split_before_its_lf_and_a_blank_line_after_it() -> None:
    """CR | LF | LF: the first LF completes the CR LF, the second is the blank line that
    ends the event (a parser that kept 'after a CR' past the LF it dropped ate it too)."""
    parser = Parser()
    assert parser.feed(b"data: x\r") == [] and parser.feed(b"\n") == []
    assert parser.feed(b"\n") == [Event("x", "message", "", None)]


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(1, 40), max_size=30))
def test_any_split_gives_the_same_events(stream: tuple[bytes, list[Event]], cuts: list[int]) -> None:
    raw, expected = stream
    assert parse(raw) == expected
    parser, got, pos = Parser(), [], 0
    for size in cuts:
        got += parser.feed(raw[pos : pos + size])
        pos += size
    got += parser.feed(raw[pos:])
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(1, 40), max_size=30))
def test_cutting_at_event_ends_loses_and_adds_nothing(stream: tuple[bytes, list[Event]], cuts: list[int]) -> None:
    """What the relay does: cut each read at its last event end, forward that, keep the
    rest. The forwarded bytes are the stream, and parse to the same events."""
    raw, expected = stream
    pending, blocks, pos = b"", [], 0
    sizes = [*cuts, len(raw)]
    for size in sizes:
        data = pending + raw[pos : pos + size]
        pos += size
        end = event_end(data)
        if end:
            blocks.append(data[:end])
        pending = data[end:]
    assert b"".join(blocks) + pending == raw
    parser = Parser()  # the client's: one parser over every block it is sent
    assert [e for block in blocks for e in parser.feed(block)] == expected
