"""A non-streamed request that may be paused: streamed upstream, paused like a stream,
answered whole in the backend's own shape (a fake job, real backends on loopback)."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from gateway.errors import GatewayError
from gateway.request.proxy import Proxy
from gateway.request.resume import Transcript
from gateway.request.whole import Shapes, as_stream, collectable
from gateway.schemas import Endpoint
from gateway.upstream.client import Upstream
from scheduler.backends.backend import BackendConfig
from scheduler.errors import DeadlineExceeded
from tests.gateway.request.doubles import ANSWER, Client, FakeJob, FakeScheduler, Seen, Traced, chat, event

At = Callable[[str], BackendConfig]


class PausedAtItsQuantum(FakeJob):
    """Its first part is paused as soon as it is a candidate (its first token)."""

    def passed_quantum(self, tokens: int) -> None:
        super().passed_quantum(tokens)
        if not self.told("pause"):
            self.pause_now()


def taught(proxy: Proxy, *backends: str) -> Proxy:
    for name in backends:
        proxy.shapes.learn(name, Endpoint.CHAT, ANSWER)
    return proxy


async def test_a_paused_whole_request_is_answered_once_in_the_backends_shape(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    job = PausedAtItsQuantum([at("part"), at("ok")], may_pause=True)
    proxy = taught(Proxy(FakeScheduler(job), upstream), "part", "ok")
    req = chat()
    response = await proxy.handle(Client().request(), req, traced.context())

    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    answer = orjson.loads(response.body)
    shape = orjson.loads(ANSWER)
    # the shape's fields, this request's values: the stream's id, both parts' text, the
    # finish, the original prompt's tokens and every part's output
    assert answer == shape | {
        "id": "s",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "HelloHello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 8, "total_tokens": 12},
    }
    first, continuation = (orjson.loads(s.body) for s in seen)
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert continuation["messages"][-1] == {"role": "assistant", "content": "Hello"}
    assert [e[0] for e in job.events if e[0] in ("pause", "finish")] == ["pause", "finish"]
    assert job.told("finish")[0][2] == {"prompt_tokens": 4, "completion_tokens": 8, "total_tokens": 12}


async def test_a_backends_first_plain_answer_teaches_its_shape_and_until_then_nothing_is_streamed(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    proxy = Proxy(FakeScheduler(FakeJob([at("ok")], may_pause=True)), upstream)
    response = await proxy.handle(Client().request(), chat(), traced.context())
    assert response.body == ANSWER and orjson.loads(seen[0].body)["stream"] is False  # passed through as it came
    assert proxy.shapes.knows("ok", Endpoint.CHAT)
    proxy.scheduler = FakeScheduler(FakeJob([at("ok")], may_pause=True))
    response = await proxy.handle(Client().request(), chat(), traced.context())
    assert orjson.loads(seen[1].body)["stream"] is True  # now it may be paused
    assert orjson.loads(response.body) == orjson.loads(ANSWER) | {"id": "s"}  # the same answer, rebuilt


async def test_a_continuation_refused_ends_in_the_http_error_a_whole_request_gets(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = PausedAtItsQuantum([at("part")], may_pause=True, pause_evicted=DeadlineExceeded("queue timeout"))
    proxy = taught(Proxy(FakeScheduler(job), upstream), "part")
    with pytest.raises(GatewayError) as err:
        await proxy.handle(Client().request(), chat(), traced.context())
    assert err.value.status == 504 and "queue" in err.value.message  # as a request refused in the queue
    assert len(job.told("finish")) == 1


@pytest.mark.parametrize(
    ("case", "extra", "expected"),
    [
        ("a plain chat request", {}, True),
        ("streamed already", {"stream": True}, False),
        ("logprobs", {"logprobs": True}, False),
        ("tools", {"tools": [{"type": "function", "function": {"name": "f"}}]}, False),
        ("token ids", {"return_token_ids": True}, False),
        ("two choices", {"n": 2}, False),
        ("a constrained output", {"response_format": {"type": "json_object"}}, False),
    ],
)
def test_what_may_be_answered_whole(case: str, extra: dict, expected: bool) -> None:
    shapes = Shapes()
    shapes.learn("b", Endpoint.CHAT, ANSWER)
    assert collectable(chat(**extra), shapes, "b") is expected, case
    assert not collectable(chat(), shapes, "other")  # no shape of that backend yet


@pytest.mark.parametrize(
    ("case", "answer"),
    [
        ("two choices", {"choices": [{"message": {"content": "a"}}, {"message": {"content": "b"}}], "usage": {}}),
        ("a tool call", {"choices": [{"message": {"content": "", "tool_calls": [{"id": "1"}]},
                                      "finish_reason": "stop"}], "usage": {}}),
        ("reasoning", {"choices": [{"message": {"content": "a", "reasoning": "b"}, "finish_reason": "stop"}],
                       "usage": {}}),
        ("logprobs", {"choices": [{"message": {"content": "a"}, "logprobs": {"content": []}, "finish_reason": "stop"}],
                      "usage": {}}),
        ("no usage", {"choices": [{"message": {"content": "a"}, "finish_reason": "stop"}]}),
    ],
)
def test_an_answer_with_more_than_text_is_no_shape(case: str, answer: dict) -> None:
    shapes = Shapes()
    shapes.learn("b", Endpoint.CHAT, orjson.dumps(answer))
    assert not shapes.knows("b", Endpoint.CHAT), case


def test_the_answer_is_the_shape_with_this_requests_values() -> None:
    """vLLM 0.32's answer, field for field: every field it writes stays, in its order."""
    vllm = {"id": "chatcmpl-old", "object": "chat.completion", "created": 1, "model": "tiny",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "old", "refusal": None,
                                                 "annotations": None, "audio": None, "function_call": None,
                                                 "tool_calls": [], "reasoning": None},
                         "logprobs": None, "finish_reason": "length", "stop_reason": None, "token_ids": None}],
            "service_tier": None, "system_fingerprint": "vllm-0.32.0-a", "usage": {
                "prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": None},
            "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None}
    shapes = Shapes()
    shapes.learn("v", Endpoint.CHAT, orjson.dumps(vllm))
    t = Transcript(chat=True)
    t.read(event({"id": "chatcmpl-new", "created": 9, "model": "tiny", "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}))
    t.read(event({"id": "chatcmpl-new", "created": 9, "model": "tiny", "choices": [
        {"index": 0, "delta": {"content": "new text"}, "finish_reason": None}]}))
    t.read(event({"id": "chatcmpl-new", "created": 9, "model": "tiny", "choices": [
        {"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": 2}], "system_fingerprint": "vllm-0.32.0-b"}))
    usage = {"prompt_tokens": 4, "total_tokens": 6, "completion_tokens": 2}
    out = orjson.loads(shapes.answer("v", Endpoint.CHAT, t, usage))
    assert list(out) == list(vllm) and list(out["choices"][0]) == list(vllm["choices"][0])
    assert (out["id"], out["created"], out["system_fingerprint"]) == ("chatcmpl-new", 9, "vllm-0.32.0-b")
    assert out["choices"][0]["message"]["content"] == "new text"
    assert (out["choices"][0]["finish_reason"], out["choices"][0]["stop_reason"]) == ("stop", 2)
    assert out["usage"] == usage | {"prompt_tokens_details": None}


def test_the_stream_a_whole_request_is_sent_as() -> None:
    req = as_stream(chat(stream_options={"include_usage": False}, max_tokens=9))
    assert req.stream and not req.include_usage and req.body["stream"] is True and "stream_options" not in req.body
    assert orjson.loads(req.upstream_body(None, counted=True))["stream_options"] == {
        "include_usage": True, "continuous_usage_stats": True,
    }
