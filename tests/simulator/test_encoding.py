"""Response bodies in OpenAI's shapes: whole answers, and the pre-rendered SSE frames of a
stream in each dialect's framing; every frame must be one valid JSON event."""

from __future__ import annotations

import orjson
import pytest

from simulator.dialects import Wire
from simulator.encoding import DONE_FRAME, FrameWriter, StreamSpec, full_response, new_request_id, usage
from simulator.protocol import Endpoint, FinishReason
from simulator.textgen import Vocabulary

VOCAB = Vocabulary()
VLLM = Wire()


def events(frames: bytes, wire: Wire = VLLM) -> list[dict]:
    """The JSON of every data event in ``frames``, written with ``wire``."""
    out = []
    for raw in frames.split(wire.end):
        if not raw:
            continue
        assert raw.startswith(wire.data), raw
        payload = raw[len(wire.data):]
        if payload != b"[DONE]":
            out.append(orjson.loads(payload))
    return out


def test_request_ids_have_openais_prefixes_and_differ() -> None:
    chat, cmpl = new_request_id(Endpoint.CHAT), new_request_id(Endpoint.COMPLETIONS)
    assert chat.startswith("chatcmpl-") and cmpl.startswith("cmpl-")
    assert new_request_id(Endpoint.CHAT) != chat


def test_usage_totals() -> None:
    assert usage(3, 4) == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


@pytest.mark.parametrize(("endpoint", "obj"), [(Endpoint.CHAT, "chat.completion"), (Endpoint.COMPLETIONS, "text_completion")])
def test_a_whole_answer_with_several_choices(endpoint: Endpoint, obj: str) -> None:
    body = orjson.loads(full_response(
        endpoint, "id-1", 1700000000, "m", [(" a b", FinishReason.STOP), (" c", FinishReason.LENGTH)], 5, 3,
    ))
    assert (body["id"], body["object"], body["created"], body["model"]) == ("id-1", obj, 1700000000, "m")
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert [c["finish_reason"] for c in body["choices"]] == ["stop", "length"]
    texts = [c["message"]["content"] if endpoint is Endpoint.CHAT else c["text"] for c in body["choices"]]
    assert texts == [" a b", " c"]
    if endpoint is Endpoint.CHAT:
        assert body["choices"][0]["message"]["role"] == "assistant"


def test_a_chat_stream_role_tokens_finish_usage_done() -> None:
    w = FrameWriter(StreamSpec(Endpoint.CHAT, "id-2", 7, "m", include_usage=True, vocab=VOCAB, start=3))
    frames = w.role() + w.tokens(0, 4) + w.finish(FinishReason.STOP) + w.usage(9, 4) + w.done
    assert frames.endswith(DONE_FRAME)
    chunks = events(frames)
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "id-2" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks[1:5])
    assert text == VOCAB.text(3, 4)  # one token a frame, from the response's first word
    assert chunks[5]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert all(c["usage"] is None for c in chunks[:6])  # include_usage: null until the usage frame
    assert chunks[6]["choices"] == [] and chunks[6]["usage"]["total_tokens"] == 13


def test_a_completions_stream_has_no_role_frame_and_text_fields() -> None:
    w = FrameWriter(StreamSpec(Endpoint.COMPLETIONS, "id-3", 7, "m", include_usage=False, vocab=VOCAB, start=0))
    assert w.role() == b""
    chunks = events(w.tokens(2, 4) + w.finish(FinishReason.LENGTH))
    assert len(chunks) == 3  # tokens 2 and 3, then the finish
    assert "".join(c["choices"][0]["text"] for c in chunks) == VOCAB.text(0, 4)[len(VOCAB.text(0, 2)):]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and "usage" not in chunks[-1]


@pytest.mark.parametrize("wire", [Wire(data=b"data:", usage_on_last_chunk=True), Wire(end=b"\r\n\r\n")])
def test_each_dialect_frames_events_its_own_way_and_tgi_puts_usage_on_the_finish(wire: Wire) -> None:
    w = FrameWriter(StreamSpec(Endpoint.CHAT, "id-4", 7, "m", include_usage=True, vocab=VOCAB, start=0, wire=wire))
    frames = w.role() + w.tokens(0, 2) + w.finish(FinishReason.STOP, usage_of=(5, 2)) + w.done
    assert frames.endswith(wire.data + b"[DONE]" + wire.end)
    chunks = events(frames, wire)
    assert chunks[-1]["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
