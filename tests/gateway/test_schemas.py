"""Parsing a request: what the gateway reads, and the bounds that keep bad input a 400."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import GatewayError
from gateway.schemas import MAX_DEPTH, Endpoint, parse, parse_int_header


def body(**extra: object) -> bytes:
    return orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}], **extra})


def nested(levels: int) -> bytes:
    """A body whose field "x", one the gateway never reads, nests ``levels`` arrays."""
    return body()[:-1] + b',"x":' + b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize("levels", [MAX_DEPTH - 2, 254, 1000, 5000])
def test_deep_nesting_anywhere_is_a_400_or_re_encodes(levels: int) -> None:
    raw = nested(levels)
    if levels + 1 <= MAX_DEPTH:
        req = parse(raw, Endpoint.CHAT, 1000)
        assert orjson.loads(req.upstream_body()) == orjson.loads(raw) | {"stream_options": {"include_usage": True}}
        return
    with pytest.raises(GatewayError) as err:
        parse(raw, Endpoint.CHAT, 1000)
    assert err.value.status == 400 and err.value.code == "invalid_json"


@pytest.mark.parametrize("value", ["1_000", " 5", "+5", "-5", "5 ", "٣", "1" * 13, "9" * 4300, "", "0x10", "1e3"])
def test_integer_headers_are_plain_digits(value: str) -> None:
    with pytest.raises(GatewayError) as err:
        parse_int_header(value, "x-triage-timeout-ms")
    assert err.value.status == 400 and err.value.param == "x-triage-timeout-ms"


@pytest.mark.parametrize(("value", "expected"), [("5", 5), ("000123", 123), ("9" * 12, 10**12 - 1), (None, None)])
def test_integer_headers(value: str | None, expected: int | None) -> None:
    assert parse_int_header(value, "x-triage-expected-tokens") == expected
