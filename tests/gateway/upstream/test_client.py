"""The boundary to backends: httpx errors become ``UpstreamError`` in one place, the
headers a backend gets, and ``Upstream.open`` for whole answers and streams."""

from __future__ import annotations

import httpx
import pytest

from gateway.upstream.client import (
    Upstream,
    UpstreamCall,
    UpstreamError,
    describe,
    headers_for,
    make_client,
    upstream_errors,
)
from scheduler.backends.backend import BackendConfig
from tests.support import MODEL

REQ = httpx.Request("POST", "http://b/v1/chat/completions")


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (httpx.ConnectError("refused", request=REQ), "could not connect"),
        (httpx.ReadTimeout("slow", request=REQ), "timed out"),
        (httpx.ConnectTimeout("slow", request=REQ), "timed out"),
        (httpx.RemoteProtocolError("closed", request=REQ), "closed the connection unexpectedly"),
        (httpx.ReadError("reset", request=REQ), "ReadError"),
    ],
)
def test_every_httpx_error_leaves_as_an_upstream_error_in_words(error: httpx.HTTPError, words: str) -> None:
    assert describe(error) == words
    with pytest.raises(UpstreamError) as caught, upstream_errors():
        raise error
    assert str(caught.value) == words and caught.value.__cause__ is error


def test_other_errors_pass_through() -> None:
    with pytest.raises(ValueError), upstream_errors():
        raise ValueError("not ours")


def test_a_backend_gets_its_own_key_and_our_request_id() -> None:
    keyed = BackendConfig("b", "http://b", "p", 1, api_key="sk-b")
    assert headers_for(keyed, "req-9", {"traceparent": "00-x"}) == {
        "content-type": "application/json", "x-request-id": "req-9", "authorization": "Bearer sk-b",
        "traceparent": "00-x",
    }
    assert "authorization" not in headers_for(BackendConfig("b", "http://b", "p", 1), "req-9")


async def test_open_reads_a_whole_answer_and_leaves_a_stream_to_the_caller(sim_url: str) -> None:
    backend = BackendConfig("sim", sim_url, "p", 4, (MODEL,))
    client = make_client(30.0)
    upstream = Upstream(client)
    try:
        body = b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": %s}'
        call = UpstreamCall(backend, "/v1/chat/completions", body % (MODEL.encode(), b"false"), headers_for(backend, "r"))
        assert call.url == f"{sim_url}/v1/chat/completions"
        whole = await upstream.open(call, stream=False)
        assert whole.status_code == 200 and whole.is_closed and whole.json()["object"] == "chat.completion"

        stream_call = UpstreamCall(backend, "/v1/chat/completions", body % (MODEL.encode(), b"true"), headers_for(backend, "r"))
        stream = await upstream.open(stream_call, stream=True)
        assert stream.status_code == 200 and not stream.is_closed  # the status is in, the body is not read
        text = b"".join([chunk async for chunk in stream.aiter_raw()])
        assert text.rstrip().endswith(b"data: [DONE]")
        await stream.aclose()
    finally:
        await client.aclose()


async def test_open_to_nowhere_is_an_upstream_error() -> None:
    from gateway.server.embedded import free_port

    backend = BackendConfig("gone", f"http://127.0.0.1:{free_port()}", "p", 1)
    client = make_client(5.0)
    try:
        with pytest.raises(UpstreamError, match="could not connect"):
            await Upstream(client).open(UpstreamCall(backend, "/v1/completions", b"{}", {}), stream=False)
    finally:
        await client.aclose()
