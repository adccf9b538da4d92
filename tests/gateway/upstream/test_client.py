"""The boundary to backends: httpx errors become ``UpstreamError`` in one place, the
headers a backend gets, and ``Upstream.open`` for whole answers and streams — on the direct
path (a plain-HTTP backend: the head written from the call's parts) as a real server reads it."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from starlette.requests import Request

from gateway.upstream.client import (
    Answer,
    RawHeaders,
    Upstream,
    UpstreamCall,
    UpstreamError,
    describe,
    headers_for,
    make_client,
    upstream_errors,
)
from scheduler.backends.backend import BackendConfig
from tests.support import MODEL, running_app

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
        assert isinstance(whole, Answer)  # a plain-HTTP backend: the direct path
        assert whole.status_code == 200 and whole.is_closed
        assert orjson.loads(whole.content)["object"] == "chat.completion"

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


class Recorder:
    """A backend that answers every request with what it received: method, path, headers, body."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await Request(scope, receive).body()
        seen = {"method": scope["method"], "path": scope["raw_path"].decode(),
                "query": scope["query_string"].decode(), "body": body.decode(),
                "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]]}
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"content-type", b"application/json"), (b"X-Seen", b"yes")]})
        await send({"type": "http.response.body", "body": orjson.dumps(seen)})


async def test_the_direct_path_sends_one_well_formed_head_and_reads_the_answer() -> None:
    client = make_client(10.0)
    upstream = Upstream(client)
    try:
        with running_app(Recorder()) as url:
            backend = BackendConfig("rec", f"{url}/prefix", "p", 1, api_key="sk-b")
            call = UpstreamCall(backend, "/v1/completions?x=1", b'{"a": 1}',
                                headers_for(backend, "req-1", {"traceparent": "00-t"}))
            for _ in range(2):  # the second on the kept connection
                answer = await upstream.open(call, stream=False)
                assert isinstance(answer, Answer) and answer.status_code == 201
                assert answer.headers.get("x-seen") == "yes" and answer.headers.get("X-SEEN") == "yes"
                assert answer.headers.get("nothing") is None and answer.headers.get("nothing", "d") == "d"
                seen = orjson.loads(answer.content)
                assert (seen["method"], seen["path"], seen["query"], seen["body"]) == (
                    "POST", "/prefix/v1/completions", "x=1", '{"a": 1}'
                )
                headers = dict(seen["headers"])
                assert len(headers) == len(seen["headers"])  # each header once
                host = url.removeprefix("http://")
                assert headers == {
                    "host": host, "content-type": "application/json", "x-request-id": "req-1",
                    "authorization": "Bearer sk-b", "traceparent": "00-t", "content-length": "8",
                    "accept": "*/*", "accept-encoding": "identity", "connection": "keep-alive", "user-agent": "triage",
                }
    finally:
        await client.aclose()


async def test_a_header_that_would_split_the_head_is_refused_before_anything_is_sent(sim_url: str) -> None:
    client = make_client(10.0)
    try:
        backend = BackendConfig("sim", sim_url, "p", 1)
        call = UpstreamCall(backend, "/v1/completions", b"{}", {"x-evil": "a\r\nx-injected: 1"})
        with pytest.raises(UpstreamError, match="LocalProtocolError"):
            await Upstream(client).open(call, stream=False)
    finally:
        await client.aclose()


def test_raw_headers_are_read_by_name_in_any_case_first_one_wins() -> None:
    headers = RawHeaders([(b"Retry-After", b"3"), (b"retry-after", b"9")])
    assert headers.get("retry-after") == "3" and headers.get("RETRY-AFTER") == "3"
