"""Stitching a paused stream into one response, and what may be paused at all."""

from __future__ import annotations

import orjson
import pytest

from gateway.request.resume import Transcript, by_ids, resumable
from gateway.schemas import Endpoint, parse


def event(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def chunk(content: str | None = None, role: str | None = None, finish: str | None = None, **extra: object) -> bytes:
    delta: dict = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return event({"id": extra.pop("id", "part"), "created": extra.pop("created", 2), "choices": [choice], **extra})


def request(endpoint: Endpoint, **body: object) -> object:
    base = {"model": "m", "stream": True}
    base |= {"messages": [{"role": "user", "content": "hi"}]} if endpoint is Endpoint.CHAT else {"prompt": "Once"}
    return parse(orjson.dumps(base | body), endpoint, 10_000)


@pytest.mark.parametrize(
    ("endpoint", "body", "expected"),
    [
        (Endpoint.CHAT, {}, True),
        (Endpoint.CHAT, {"n": 2}, False),
        (Endpoint.CHAT, {"stream": False}, False),
        (Endpoint.CHAT, {"continue_final_message": True}, False),
        (Endpoint.COMPLETIONS, {}, True),
        (Endpoint.COMPLETIONS, {"prompt": [1, 2, 3]}, False),
        (Endpoint.COMPLETIONS, {"echo": True}, False),
        (Endpoint.COMPLETIONS, {"suffix": "end"}, False),
        (Endpoint.COMPLETIONS, {"best_of": 3}, False),
        (Endpoint.CHAT, {"response_format": {"type": "text"}}, True),
        (Endpoint.CHAT, {"response_format": {"type": "json_object"}}, False),  # a grammar would restart
        (Endpoint.CHAT, {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, False),
        (Endpoint.COMPLETIONS, {"guided_regex": "[a-z]+"}, False),
        (Endpoint.CHAT, {"structured_outputs": {"choice": ["a", "b"]}}, False),
    ],
)
def test_what_may_be_paused(endpoint: Endpoint, body: dict, expected: bool) -> None:
    assert resumable(request(endpoint, **body)) is expected


def test_a_tool_call_makes_a_stream_unpausable() -> None:
    t = Transcript(chat=True)
    t.read(chunk("Let me look", role="assistant"))
    assert t.progress() == 1
    tool = {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}
    t.read(event({"id": "x", "created": 1, "choices": [tool]}))
    assert not t.resumable and t.progress() is None


def test_parts_are_stitched_into_one_response() -> None:
    t = Transcript(chat=True)
    first = chunk(role="assistant", content="", id="chatcmpl-1", created=100) + chunk(" Hello", id="chatcmpl-1")
    assert t.read(first) == first  # the first part passes as it is
    t.next_part()
    second = (chunk(role="assistant", content="", id="chatcmpl-2", created=200) + chunk(" world")
              + chunk(finish="stop")
              + event({"id": "chatcmpl-2", "created": 200, "choices": [],
                       "usage": {"prompt_tokens": 11, "completion_tokens": 1, "total_tokens": 12}})
              + b"data: [DONE]\n\n")
    out = t.read(second)
    events = [orjson.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")]
    assert {e["id"] for e in events} == {"chatcmpl-1"} and {e["created"] for e in events} == {100}
    assert not any((c.get("delta") or {}).get("role") for e in events for c in e["choices"])  # one role chunk
    assert events[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    assert out.endswith(b"data: [DONE]\n\n") and t.text == " Hello world"


@pytest.mark.parametrize("endpoint", [Endpoint.CHAT, Endpoint.COMPLETIONS])
def test_a_continuation_asks_for_the_rest(endpoint: Endpoint) -> None:
    req = request(endpoint, max_tokens=50, temperature=0.3)
    t = Transcript(chat=endpoint is Endpoint.CHAT)
    for word in (" a", " b", " c"):
        t.read(chunk(word) if t.chat else event({"id": "x", "created": 1, "choices": [{"index": 0, "text": word}]}))
    body = orjson.loads(req.upstream_body(None, t.next_part()))
    assert body["max_tokens"] == 47 and body["temperature"] == 0.3
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}  # counted exactly
    if t.chat:
        assert body["messages"][-1] == {"role": "assistant", "content": " a b c"}
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    else:
        assert body["prompt"] == "Once a b c"


def test_a_stream_that_may_be_paused_asks_for_its_running_count_and_others_do_not() -> None:
    req = request(Endpoint.CHAT, stream_options={"include_usage": False})
    assert orjson.loads(req.upstream_body(None, counted=True))["stream_options"] == {
        "include_usage": True, "continuous_usage_stats": True,
    }
    assert orjson.loads(req.upstream_body(None))["stream_options"] == {"include_usage": True}
    whole = request(Endpoint.CHAT, stream=False)
    assert "stream_options" not in orjson.loads(whole.upstream_body(None, counted=True))


# vLLM 0.32's chunks with continuous_usage_stats: the running usage follows the choices
# (model_dump_json(exclude_unset=True)); without it the same chunk ends at the choices
RUNNING = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
    b'"delta":{"content":" the cat sat"},"logprobs":null,"finish_reason":null}],'
    b'"usage":{"prompt_tokens":9,"total_tokens":%d,"completion_tokens":%d,"completion_tokens_details":null}}\n\n'
)
PLAIN = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
    b'"delta":{"content":" the cat sat"},"logprobs":null,"finish_reason":null}]}\n\n'
)


def test_merged_tokens_are_counted_as_the_engine_counts_them_and_the_running_usage_is_cut() -> None:
    t = Transcript(chat=True)
    # the engine fell behind: three tokens in one chunk, then three more
    assert t.read(RUNNING % (12, 3)) == PLAIN  # the bytes the engine sends without the option
    assert t.tokens == 3
    assert t.read(RUNNING % (15, 6) + RUNNING % (16, 7)) == PLAIN + PLAIN
    assert t.tokens == 7


def test_a_client_that_asked_for_the_running_usage_keeps_it() -> None:
    t = Transcript(chat=True, keep_running_usage=True)
    assert t.read(RUNNING % (12, 3)) == RUNNING % (12, 3)
    assert t.tokens == 3


def test_a_continuation_counts_from_what_it_carried_and_cuts_its_running_usage() -> None:
    t = Transcript(chat=True)
    t.read(RUNNING % (12, 3))
    t.next_part()
    out = t.read(RUNNING % (20, 2))  # the continuation's own count: 2 more
    assert t.tokens == 5
    data = orjson.loads(out.removeprefix(b"data: "))
    assert "usage" not in data and data["choices"][0]["delta"]["content"] == " the cat sat"


# vLLM 0.32's chat stream with return_token_ids and running usage (what a stream that may be
# paused asks for), and the same chunks as vLLM writes them to a client that asked for neither
ROLE_IDS = (
    b'data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":3,'
    b'"total_tokens":3,"completion_tokens":0,"completion_tokens_details":null},"prompt_token_ids":[4,0,9],'
    b'"prompt_text":null}\n\n'
)
ROLE = (
    b'data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,'
    b'"prompt_text":null}\n\n'
)
WORD_IDS = (
    b'data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
    b'"delta":{"content":"%s"},"logprobs":null,"finish_reason":null,"token_ids":[%d]}],"usage":{"prompt_tokens":3,'
    b'"total_tokens":%d,"completion_tokens":%d,"completion_tokens_details":null}}\n\n'
)
WORD = (
    b'data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
    b'"delta":{"content":"%s"},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
)
LAST = (
    b'data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
    b'"delta":{"content":"%s"},"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null}]}\n\n'
)
# the continuation: vLLM's completions stream from the token ids
CMPL = (
    b'data: {"id":"cmpl-5","object":"text_completion","created":8,"model":"m","choices":[{"index":0,"text":"%s",'
    b'"logprobs":null,"finish_reason":%s,"stop_reason":null,"prompt_token_ids":%s,"token_ids":[%d]}],'
    b'"usage":{"prompt_tokens":4,"total_tokens":%d,"completion_tokens":%d}}\n\n'
)
CMPL_USAGE = (
    b'data: {"id":"cmpl-5","object":"text_completion","created":8,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2}}\n\n'
)


def test_a_stream_that_asked_for_ids_reaches_the_client_as_vllm_writes_it_without_them() -> None:
    t = Transcript(chat=True, ids=True)
    assert t.read(ROLE_IDS) == ROLE
    assert t.read(WORD_IDS % (b" a", 11, 4, 1) + WORD_IDS % (b" b", 12, 5, 2)) == WORD % b" a" + WORD % b" b"
    assert (t.prompt_ids, t.ids, t.tokens) == ([4, 0, 9], [11, 12], 2)


def test_a_client_that_asked_for_ids_keeps_them() -> None:
    t = Transcript(chat=True, ids=True, keep_ids=True, keep_running_usage=True)
    assert t.read(WORD_IDS % (b" a", 11, 4, 1)) == WORD_IDS % (b" a", 11, 4, 1)


@pytest.mark.parametrize("cap", ["max_tokens", "max_completion_tokens"])
def test_a_continuation_from_ids_asks_completions_for_the_rest_of_the_same_tokens(cap: str) -> None:
    req = request(Endpoint.CHAT, **{cap: 50}, temperature=0, seed=3, tools=None)
    t = Transcript(chat=True, ids=True)
    t.read(ROLE_IDS + WORD_IDS % (b" a", 11, 4, 1) + WORD_IDS % (b" b", 12, 5, 2))
    carried = t.next_part()
    assert carried.ids == (4, 0, 9, 11, 12) and carried.tokens == 2
    assert req.part_endpoint(carried) is Endpoint.COMPLETIONS
    body = orjson.loads(req.upstream_body(7, carried))
    assert body == {
        "model": "m", "stream": True, "temperature": 0, "seed": 3, "prompt": [4, 0, 9, 11, 12], "max_tokens": 48,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}, "return_token_ids": True,
        "priority": 7,
    }


def test_a_continuation_from_ids_reaches_the_client_as_vllms_own_chat_chunks() -> None:
    t = Transcript(chat=True, ids=True)
    t.read(ROLE_IDS + WORD_IDS % (b" a", 11, 4, 1))
    t.next_part()
    out = t.read(
        CMPL % (b" b", b"null", b"[4,0,9,11]", 12, 5, 1) + CMPL % (b" c", b'"length"', b"null", 13, 6, 2)
        + CMPL_USAGE + b"data: [DONE]\n\n"
    )
    usage = (
        b'data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"m","choices":[],'
        b'"usage":{"prompt_tokens":3,"total_tokens":6,"completion_tokens":3}}\n\n'
    )
    assert out == WORD % b" b" + LAST % b" c" + usage + b"data: [DONE]\n\n"
    assert t.text == " a b c" and t.tokens == 3 and t.ids == [11, 12, 13]


def test_a_stream_without_every_id_resumes_from_its_text() -> None:
    t = Transcript(chat=True, ids=True)
    t.read(ROLE_IDS + WORD_IDS % (b" a", 11, 4, 1) + chunk(" b"))  # an event without its ids
    carried = t.next_part()
    assert carried.ids is None and carried.text == " a b"
    body = orjson.loads(request(Endpoint.CHAT).upstream_body(None, carried))
    assert body["messages"][-1] == {"role": "assistant", "content": " a b"} and "return_token_ids" not in body


@pytest.mark.parametrize(("body", "expected"), [
    ({}, True), ({"stop": ["\n\n"]}, False), ({"stop": []}, True), ({"logprobs": True}, False),
    ({"top_logprobs": 2}, False),
])
def test_what_may_resume_from_token_ids(body: dict, expected: bool) -> None:
    assert by_ids(request(Endpoint.CHAT, **body)) is expected


def test_tokens_whose_text_was_held_back_are_made_again() -> None:
    """The engine sends no text for a token that ends inside a character: paused there,
    the continuation starts before it, so the character comes whole."""
    t = Transcript(chat=True, ids=True)
    t.read(ROLE_IDS + WORD_IDS % (b" a", 11, 4, 1) + WORD_IDS % (b"", 12, 5, 2))
    carried = t.next_part()
    assert carried.ids == (4, 0, 9, 11) and carried.tokens == 1 and t.carried == 1


# llama.cpp's completions chunks with timings_per_token (what a stream on it that may be paused
# asks for); the finish chunk carries timings and usage unasked
LLAMA = (
    b'data: {"choices":[{"text":"%s","index":0,"logprobs":null,"finish_reason":%s}],"created":7,"model":"m",'
    b'"system_fingerprint":"b0","object":"text_completion","id":"c-1"%s,"timings":{"cache_n":0,"prompt_n":2,'
    b'"predicted_n":%d,"predicted_ms":1.5}}\n\n'
)


def test_llamacpps_count_is_read_from_its_timings_which_are_cut_but_from_the_finish_chunk() -> None:
    t = Transcript(chat=False)
    t.timings = True
    # two tokens in one event (a character held back, then sent whole)
    assert t.read(LLAMA % (b" a", b"null", b"", 2)) == LLAMA.split(b',"timings"')[0] % (b" a", b"null", b"") + b"}\n\n"
    assert t.tokens == 2
    usage = b',"usage":{"completion_tokens":3,"prompt_tokens":2,"total_tokens":5}'
    last = LLAMA % (b" b", b'"length"', usage, 3)
    assert t.read(last) == last  # its usage is llama.cpp's own, and its timings come unasked
    assert t.tokens == 3


def test_a_continuation_on_llamacpp_counts_from_its_timings_and_sums_its_usage() -> None:
    t = Transcript(chat=False)
    t.timings = True
    t.read(LLAMA % (b" a", b"null", b"", 2))
    carried = t.next_part()
    assert carried.tokens == 2
    body = orjson.loads(request(Endpoint.COMPLETIONS, max_tokens=10).upstream_body(None, carried, timings=True))
    assert body["timings_per_token"] is True and body["max_tokens"] == 8 and body["prompt"] == "Once a"
    assert body["stream_options"] == {"include_usage": True}
    out = t.read(LLAMA % (b" b", b'"length"', b',"usage":{"completion_tokens":1,"prompt_tokens":4,"total_tokens":5}', 1))
    data = orjson.loads(out.removeprefix(b"data: "))
    assert data["usage"] == {"completion_tokens": 3, "prompt_tokens": 2, "total_tokens": 5} and t.tokens == 3
    assert data["timings"]["predicted_n"] == 1 and data["id"] == "c-1"
