"""A backend's refusal read: Retry-After in both forms, the bounded cool-down, and its
error body rewritten in OpenAI's shape without internals."""

from __future__ import annotations

import orjson
import pytest

from gateway.upstream.refusal import MAX_MESSAGE_CHARS, Cooldown, client_error, retry_after_s

NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 GMT


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("5", 5.0),
        (" 5 ", 5.0),
        ("0", 0.0),
        ("Tue, 14 Nov 2023 22:13:50 GMT", 30.0),
        ("Tue, 14 Nov 2023 22:13:00 GMT", 0.0),  # in the past
        ("-5", None),
        ("1.5", None),  # not delay-seconds
        ("soon", None),
        ("", None),
    ],
)
def test_retry_after(value: str | None, seconds: float | None) -> None:
    assert retry_after_s(value, NOW) == seconds


@pytest.mark.parametrize(
    ("header", "cool"),
    [(None, 1.0), ("3", 3.0), ("0", 0.05), ("3600", 30.0), ("garbage", 1.0)],
)
def test_the_cool_down_is_the_header_bounded(header: str | None, cool: float) -> None:
    assert Cooldown(default_s=1.0, max_s=30.0).seconds(header) == cool


def error(status: int, body: bytes) -> dict[str, object]:
    out = orjson.loads(client_error(status, body))["error"]
    assert set(out) == {"message", "type", "param", "code"}
    return out


@pytest.mark.parametrize(
    ("case", "status", "body", "message", "type_", "code"),
    [
        ("OpenAI's shape", 400, b'{"error":{"message":"bad","type":"invalid_request_error","code":"x","param":"n"}}',
         "bad", "invalid_request_error", "x"),
        ("vLLM's shape", 400, b'{"object":"error","message":"too long","type":"BadRequestError","code":400}',
         "too long", "BadRequestError", "400"),
        ("TGI's shape", 422, b'{"error":"Input validation error","error_type":"validation"}',
         "Input validation error", "validation", None),
        ("FastAPI's detail", 404, b'{"detail":"Not Found"}', "Not Found", "not_found_error", None),
        ("plain text", 503, b"upstream busy", "upstream busy", "upstream_error", None),
        ("a traceback", 500, b'Traceback (most recent call last):\n  File "/a.py", line 1\nKeyError: k',
         "The inference backend answered 500.", "upstream_error", None),
        ("a traceback in a JSON message", 500, b'{"detail":"Traceback (most recent call last):\\n  File \\"x\\""}',
         "The inference backend answered 500.", "upstream_error", None),
        ("an HTML page", 502, b"<html><body>Bad Gateway</body></html>",
         "The inference backend answered 502.", "upstream_error", None),
        ("empty", 500, b"", "The inference backend answered 500.", "upstream_error", None),
        ("a type that is not a word", 400, b'{"error":{"message":"m","type":"a b <c>"}}',
         "m", "invalid_request_error", None),
    ],
)
def test_client_error(case: str, status: int, body: bytes, message: str, type_: str, code: str | None) -> None:
    out = error(status, body)
    assert (out["message"], out["type"], out["code"]) == (message, type_, code), case


def test_a_long_message_is_cut() -> None:
    out = error(400, orjson.dumps({"error": {"message": "x" * 100_000}}))
    assert isinstance(out["message"], str) and len(out["message"]) == MAX_MESSAGE_CHARS
