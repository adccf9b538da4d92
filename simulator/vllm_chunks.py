"""vLLM 0.32's own response shapes, for the simulator's ``vllm`` dialect.

What vLLM's OpenAI server writes beyond OpenAI's shapes (read off vLLM 0.32.0's CPU build;
``tests/engines/test_vllm_shapes.py`` compares them with a running vLLM, and
``tests/simulator/test_vllm_chunks.py`` with its recorded shapes):

- every chunk carries its token ids: a chat chunk's choice ``token_ids``, its role chunk
  ``prompt_token_ids`` and ``prompt_text``; a completions chunk's choice ``stop_reason``,
  ``prompt_token_ids`` (the first chunk's) and ``token_ids``. They are ``null`` unless the
  request asked for them (``return_token_ids``);
- the finish rides on the last token's chunk (``finish_reason`` and ``stop_reason``), not
  a chunk of its own;
- ``include_usage`` adds no ``"usage": null``: the usage comes only on its own chunk
  (``choices: []``), or, with ``continuous_usage_stats``, on every chunk as the running
  count (a chat chunk's with ``completion_tokens_details``);
- ``system_fingerprint`` on the last chunk (the usage chunk, else the finish);
- usage fields in the order prompt, total, completion; a whole answer carries vLLM's
  extra fields, ``null`` where the simulator has nothing to tell.

Token ids are the simulator's own (``simulator/token_ids.py``): a continuation that sends
them back to ``/v1/completions`` goes on exactly as the text would.
"""

from __future__ import annotations

from typing import Any

import orjson

from simulator.encoding import StreamSpec, usage
from simulator.protocol import Endpoint, FinishReason
from simulator.token_ids import word_id

FINGERPRINT = b'"vllm-0.32.0-triage-simulator"'


def _usage(prompt: int, completion: int) -> bytes:
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d' % (prompt, prompt + completion, completion)


class VllmFrameWriter:
    """Pre-rendered SSE frames of one streamed response, as vLLM 0.32 writes them
    (the interface of ``encoding.FrameWriter``)."""

    __slots__ = ("_head", "_chat", "_vocab", "_start", "_end", "done", "_prompt", "_running", "_ids",
                 "_prompt_ids", "_include_usage", "_token", "_details")

    def __init__(
        self, spec: StreamSpec, prompt_tokens: int, running_usage: bool = False, prompt_ids: list[int] | None = None,
    ) -> None:
        self._chat = spec.endpoint is Endpoint.CHAT
        obj = b"chat.completion.chunk" if self._chat else b"text_completion"
        self._head = spec.wire.data + b'{"id":"%s","object":"%s","created":%d,"model":%s,"choices":' % (
            spec.request_id.encode(), obj, spec.created, orjson.dumps(spec.model),
        )  # fmt: skip
        self._end = spec.wire.end
        self.done = spec.wire.done
        self._vocab = spec.vocab
        self._start = spec.start
        self._prompt = prompt_tokens
        self._running = running_usage
        self._include_usage = spec.include_usage
        self._ids = prompt_ids is not None  # each token's id told
        self._prompt_ids = orjson.dumps(prompt_ids) if prompt_ids is not None else b"null"
        self._details = b',"completion_tokens_details":null}' if self._chat else b"}"
        self._token = b'[{"index":0,"delta":{"content":' if self._chat else b'[{"index":0,"text":'

    def _running_usage(self, made: int) -> bytes:
        return b',"usage":' + _usage(self._prompt, made) + self._details if self._running else b""

    def role(self) -> bytes:
        """The first chat frame; completions have none."""
        if not self._chat:
            return b""
        return (
            self._head + b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
            + self._running_usage(0) + b',"prompt_token_ids":' + self._prompt_ids + b',"prompt_text":null}' + self._end
        )

    def _frame(self, i: int, finish: FinishReason | None, made: int | None = None) -> bytes:
        """Token ``i``'s frame (``i == -1``: a finish with no token of its own, after ``made``)."""
        text = self._vocab.json_word(self._start, i) if i >= 0 else b'""'
        ids = (b"[%d]" % word_id((self._start + i) % len(self._vocab)) if i >= 0 else b"[]") if self._ids else b"null"
        reason = b'"%s","stop_reason":null' % str(finish).encode() if finish is not None else b"null"
        if self._chat:
            choice = text + b'},"logprobs":null,"finish_reason":' + reason + b',"token_ids":' + ids + b"}]"
        else:
            first = self._prompt_ids if i <= 0 else b"null"
            if finish is None:
                reason += b',"stop_reason":null'
            choice = text + b',"logprobs":null,"finish_reason":' + reason + b',"prompt_token_ids":' + first
            choice += b',"token_ids":' + ids + b"}]"
        tail = self._running_usage(i + 1 if made is None else made)
        if finish is not None and not self._include_usage:
            tail += b',"system_fingerprint":' + FINGERPRINT
        return self._head + self._token + choice + tail + b"}" + self._end

    def tokens(self, first: int, end: int) -> bytes:
        """Content frames for output tokens ``first`` .. ``end - 1``, one token each."""
        return b"".join(self._frame(i, None) for i in range(first, end))

    def end(self, first: int, end: int, reason: FinishReason, usage_of: tuple[int, int] | None = None) -> bytes:
        """The last content frames: tokens ``first`` .. ``end - 1``, the last with the finish."""
        if end <= first:
            return self._frame(-1, reason, end)
        return self.tokens(first, end - 1) + self._frame(end - 1, reason)

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        return (
            self._head + b'[],"usage":' + _usage(prompt_tokens, completion_tokens)
            + b'},"system_fingerprint":' + FINGERPRINT + b"}" + self._end
        )


def full_response(
    endpoint: Endpoint,
    request_id: str,
    created: int,
    model: str,
    choices: list[tuple[str, FinishReason, list[int]]],
    prompt_tokens: int,
    completion_tokens: int,
    prompt_ids: list[int] | None,
) -> bytes:
    """A non-streamed answer in vLLM's shape: one (text, finish reason, token ids) per
    choice; the ids told only with ``prompt_ids`` (asked)."""
    asked = prompt_ids is not None
    out: list[dict[str, Any]] = []
    for i, (text, finish, ids) in enumerate(choices):
        told = ids if asked else None
        if endpoint is Endpoint.CHAT:
            message = {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                       "function_call": None, "reasoning": None}
            out.append({"index": i, "message": message, "logprobs": None, "finish_reason": str(finish),
                        "stop_reason": None, "token_ids": told, "routed_experts": None})
        else:
            out.append({"index": i, "text": text, "logprobs": None, "finish_reason": str(finish), "stop_reason": None,
                        "token_ids": told, "prompt_logprobs": None, "prompt_token_ids": prompt_ids,
                        "routed_experts": None})
    counts = usage(prompt_tokens, completion_tokens)
    body: dict[str, Any] = {
        "id": request_id,
        "object": "chat.completion" if endpoint is Endpoint.CHAT else "text_completion",
        "created": created,
        "model": model,
        "choices": out,
        "service_tier": None,
        "system_fingerprint": orjson.loads(FINGERPRINT),
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": counts["total_tokens"],
                  "completion_tokens": completion_tokens, "prompt_tokens_details": None,
                  "completion_tokens_details": None},
    }
    if endpoint is Endpoint.CHAT:
        body.update(prompt_logprobs=None, prompt_token_ids=prompt_ids, prompt_text=None)
    body.update(kv_transfer_params=None, ec_transfer_params=None, metrics=None)
    return orjson.dumps(body)
