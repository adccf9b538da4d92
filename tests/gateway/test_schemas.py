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


@pytest.mark.parametrize(("n", "ok"), [(None, 1), (1, 1), (4, 4), (128, 128), (0, None), (129, None), (True, None),
                                       ("2", None), (1.5, None)])
def test_n_is_a_bounded_integer(n: object, ok: int | None) -> None:
    raw = body(n=n) if n is not None else body()
    if ok is not None:
        assert parse(raw, Endpoint.CHAT, 1000).n == ok
        return
    with pytest.raises(GatewayError) as err:
        parse(raw, Endpoint.CHAT, 1000)
    assert err.value.status == 400 and err.value.param == "n"


@pytest.mark.parametrize("value", ["text", ["a", "b"], [1, 2, 3], [[1, 2], [3]]])
def test_embeddings_are_one_short_answer(value: object) -> None:
    raw = orjson.dumps({"model": "m", "input": value, "stream": True})
    req = parse(raw, Endpoint.EMBEDDINGS, 1000)
    assert (req.stream, req.include_usage, req.cap, req.n) == (False, False, 1, 1)
    assert req.upstream_body() == raw  # passed through unchanged
    assert Endpoint.EMBEDDINGS.operation == "embeddings"


def test_a_resolved_model_is_what_goes_upstream() -> None:
    req = parse(body(max_tokens=5), Endpoint.CHAT, 1000)
    assert req.with_model("m") is req
    served = req.with_model("m:latest")
    assert served.model == "m:latest" and served.cap == 5
    assert orjson.loads(served.upstream_body())["model"] == "m:latest"
    no_change = parse(body(stream=False), Endpoint.CHAT, 1000).with_model("m:latest")
    assert orjson.loads(no_change.upstream_body()) == {**orjson.loads(body(stream=False)), "model": "m:latest"}
