"""Response bodies in OpenAI's shapes: whole JSON responses and SSE stream frames.

Stream frames are the hot path (one per token), so each response pre-renders the bytes
around the token text once; a content frame is then ``prefix + token + suffix``. The
frames match what OpenAI and vLLM send:

- chat: ``object: "chat.completion.chunk"``; the first frame has ``delta.role``, each
  content frame ``delta.content`` of one token, the last ``delta: {}`` with the finish
  reason;
- completions: ``object: "text_completion"`` with ``choices[0].text``; the last frame
  has empty text and the finish reason;
- vLLM's own fields (token ids, the finish on the last token's chunk) are written by
  ``simulator/vllm_chunks.py`` for its dialect;
- with ``include_usage``, every frame carries ``"usage": null`` and an extra frame with
  ``choices: []`` and the usage comes before ``data: [DONE]`` (or, as TGI does, the
  finish frame carries the usage: ``Wire.usage_on_last_chunk``).

The bytes around each event (``data: `` or ``data:``, ``\n\n`` or ``\r\n\r\n``) are
the dialect's (``simulator/dialects.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol

import orjson

from simulator.dialects import Wire
from simulator.protocol import Endpoint, FinishReason
from simulator.textgen import Vocabulary

DONE_FRAME = b"data: [DONE]\n\n"


def new_request_id(endpoint: Endpoint) -> str:
    prefix = "chatcmpl-" if endpoint is Endpoint.CHAT else "cmpl-"
    return prefix + os.urandom(12).hex()


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def full_response(
    endpoint: Endpoint,
    request_id: str,
    created: int,
    model: str,
    choices: list[tuple[str, FinishReason]],
    prompt_tokens: int,
    completion_tokens: int,
) -> bytes:
    """The body of a non-streamed response: one (text, finish reason) per choice;
    ``completion_tokens`` counts every choice's, as OpenAI's usage does."""
    out: list[dict[str, object]] = []
    for i, (text, finish_reason) in enumerate(choices):
        if endpoint is Endpoint.CHAT:
            out.append({
                "index": i,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": str(finish_reason),
            })
        else:
            out.append({"index": i, "text": text, "logprobs": None, "finish_reason": str(finish_reason)})
    return orjson.dumps(
        {
            "id": request_id,
            "object": "chat.completion" if endpoint is Endpoint.CHAT else "text_completion",
            "created": created,
            "model": model,
            "choices": out,
            "usage": usage(prompt_tokens, completion_tokens),
        }
    )


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """What every dialect's frames of one streamed response are made from."""

    endpoint: Endpoint
    request_id: str
    created: int
    model: str
    include_usage: bool  # stream_options.include_usage
    vocab: Vocabulary
    start: int  # the reply's first word on the vocabulary's cycle
    wire: Wire = field(default_factory=Wire)  # the dialect's bytes around each event


class StreamFrames(Protocol):
    """What writes one streamed response's frames: this module's ``FrameWriter``, or a
    dialect's own (``vllm_chunks.VllmFrameWriter``, ``llamacpp_chunks.LlamacppFrameWriter``)."""

    done: bytes  # the last frame: data: [DONE]

    def role(self) -> bytes:
        """The first chat frame (the assistant's role); completions have none."""
        ...

    def tokens(self, first: int, end: int) -> bytes:
        """Content frames for output tokens ``first`` .. ``end - 1``."""
        ...

    def end(self, first: int, end: int, reason: FinishReason, usage_of: tuple[int, int] | None = None) -> bytes:
        """The last content frames and the finish; ``usage_of`` (prompt, completion tokens): the usage rides on it."""
        ...

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The usage frame of its own (``choices: []``)."""
        ...


class FrameWriter:
    """Pre-rendered SSE frames of one streamed response."""

    __slots__ = ("_head", "_prefix", "_suffix", "_tail", "_chat", "_vocab", "_start", "_end", "done")

    def __init__(self, spec: StreamSpec) -> None:
        wire, include_usage, vocab, start = spec.wire, spec.include_usage, spec.vocab, spec.start
        self._chat = spec.endpoint is Endpoint.CHAT
        obj = b"chat.completion.chunk" if self._chat else b"text_completion"
        self._head = wire.data + b'{"id":"%s","object":"%s","created":%d,"model":%s,"choices":' % (
            spec.request_id.encode(),
            obj,
            spec.created,
            orjson.dumps(spec.model),
        )
        self._end = wire.end
        self.done = wire.done
        self._tail = b',"usage":null}' + wire.end if include_usage else b"}" + wire.end
        opening = b'[{"index":0,"delta":{"content":' if self._chat else b'[{"index":0,"text":'
        close = b"}" if self._chat else b""
        self._prefix = self._head + opening
        self._suffix = close + b',"logprobs":null,"finish_reason":null}]' + self._tail
        self._vocab = vocab
        self._start = start

    def role(self) -> bytes:
        """The first chat frame; completions have none."""
        if not self._chat:
            return b""
        return (
            self._head
            + b'[{"index":0,"delta":{"role":"assistant","content":""},'
            + (b'"logprobs":null,"finish_reason":null}]' + self._tail)
        )

    def tokens(self, first: int, end: int) -> bytes:
        """Content frames for output tokens ``first`` .. ``end - 1``, one token each."""
        prefix, suffix, vocab, start = self._prefix, self._suffix, self._vocab, self._start
        return b"".join(prefix + vocab.json_word(start, i) + suffix for i in range(first, end))

    def end(self, first: int, end: int, reason: FinishReason, usage_of: tuple[int, int] | None = None) -> bytes:
        """The last content frames: tokens ``first`` .. ``end - 1``, then the finish frame."""
        return self.tokens(first, end) + self.finish(reason, usage_of)

    def finish(self, reason: FinishReason, usage_of: tuple[int, int] | None = None) -> bytes:
        """The last content frame; with ``usage_of`` (prompt, completion tokens) it carries the usage."""
        body = b'[{"index":0,"delta":{},' if self._chat else b'[{"index":0,"text":"",'
        tail = self._tail
        if usage_of is not None:
            tail = b',"usage":' + orjson.dumps(usage(*usage_of)) + b"}" + self._end
        return self._head + body + b'"logprobs":null,"finish_reason":"%s"}]' % str(reason).encode() + tail

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        return self._head + b'[],"usage":' + orjson.dumps(usage(prompt_tokens, completion_tokens)) + b"}" + self._end
