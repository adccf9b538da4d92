"""Message heads of the lean transport: a request head written once, with its body's
length; a response head read, and anything that is not HTTP/1.x refused."""

from __future__ import annotations

import httpx
import pytest

from gateway.upstream.connection import encode_head, parse_head

REQ = httpx.Request("POST", "http://b:8000/v1/chat/completions?x=1", headers={"x-request-id": "r1"}, content=b"{}")


def test_a_request_head_carries_its_headers_and_the_bodys_length() -> None:
    head = encode_head(REQ, 2)
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions?x=1 HTTP/1.1"
    assert b"x-request-id: r1" in lines and b"Host: b:8000" in lines
    assert [line for line in lines if line.lower().startswith(b"content-length")] == [b"Content-Length: 2"]
    assert head.endswith(b"\r\n\r\n")


def test_a_length_is_added_when_the_request_has_none() -> None:
    req = httpx.Request("POST", "http://b/", stream=httpx.ByteStream(b"abc"))  # a stream: no length header
    assert "content-length" not in req.headers
    assert b"content-length: 3\r\n" in encode_head(req, 3)


def test_the_body_is_sent_whole_so_no_chunked_framing_is_announced() -> None:
    req = httpx.Request("POST", "http://b/", headers={"transfer-encoding": "chunked", "content-length": "3"})
    lines = encode_head(req, 3).split(b"\r\n")
    assert not any(line.lower().startswith(b"transfer-encoding") for line in lines)
    assert sum(line.lower().startswith(b"content-length") for line in lines) == 1


def test_a_get_without_a_body_has_no_length() -> None:
    assert b"content-length" not in encode_head(httpx.Request("GET", "http://b/metrics"), 0).lower()


def test_a_response_head_is_read_into_status_version_reason_and_headers() -> None:
    status, meta, headers = parse_head(b"HTTP/1.1 429 Too Many Requests\r\nretry-after:  2 \r\nx-a: b\r\n\r\n", REQ)
    assert status == 429 and meta == b"HTTP/1.1\x00Too Many Requests"
    assert headers == [(b"retry-after", b"2"), (b"x-a", b"b")]
    assert parse_head(b"HTTP/1.0 200\r\n\r\n", REQ)[:2] == (200, b"HTTP/1.0\x00")  # no reason phrase


@pytest.mark.parametrize(
    "head",
    [b"SSH-2.0-nope\r\n\r\n", b"HTTP/1.1 abc OK\r\n\r\n", b"HTTP/2 200\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n"],
)
def test_what_is_not_an_http1_head_is_a_protocol_error(head: bytes) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        parse_head(head, REQ)
