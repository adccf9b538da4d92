"""A non-streamed request that may be paused: streamed upstream, answered whole.

A client that does not stream waits for one JSON body, so the gateway could not pause its
generation: the slot stayed held for the whole of a batch client's long job. On a
backend that can resume, such a request is sent upstream as a stream instead (the
client's body with ``stream: true``); the pause loop of a streamed request runs on it
unchanged, and when it ends the gateway writes the answer the engine would have sent.

An answer is rebuilt only where it can be rebuilt faithfully. The engine's own
non-streamed answers are the model: the first plain answer a backend gives on an
endpoint (one choice of text, no tool call, no reasoning, no logprobs) is kept as its
**shape**, and a rebuilt answer is that shape with this request's values put in — the
stream's ``id``, ``created`` and ``model``, the text, ``finish_reason`` and
``stop_reason``, the usage numbers (every part's output summed, the original prompt),
and the fingerprint. Every other field is the engine's, as it writes it. Until a
backend has answered once, or for a request whose answer holds more than text
(``logprobs``, tools, token ids, ``echo``, a constrained output), nothing is changed:
the request passes through and is not paused.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import orjson

from gateway.request.resume import Transcript, resumable
from gateway.schemas import Endpoint, InferenceRequest

# request fields whose answer holds more than the text a stream's chunks carry
_MORE_THAN_TEXT = ("logprobs", "top_logprobs", "prompt_logprobs", "return_token_ids", "tools", "functions", "echo")


def as_stream(req: InferenceRequest) -> InferenceRequest:
    """The same request, streamed (usage is asked for by ``upstream_body``)."""
    body = {**req.body, "stream": True}
    body.pop("stream_options", None)
    return dataclasses.replace(req, stream=True, include_usage=False, body=body, raw=b"")


def _text_choice(answer: dict[str, Any], endpoint: Endpoint) -> dict[str, Any] | None:
    """The one choice of a plain text answer, or None."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    if choice.get("logprobs") is not None or choice.get("finish_reason") not in ("stop", "length"):
        return None
    if endpoint is Endpoint.COMPLETIONS:
        return choice if isinstance(choice.get("text"), str) else None
    message = choice.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), str):
        return None
    if message.get("tool_calls") or any(message.get(k) for k in ("reasoning", "reasoning_content", "function_call")):
        return None
    return choice


class Shapes:
    """Each backend's non-streamed answer, per endpoint, as it writes one."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, Endpoint], dict[str, Any]] = {}

    def learn(self, backend: str, endpoint: Endpoint, body: bytes) -> None:
        """Keep a plain answer ``backend`` gave as its shape (the first one)."""
        if (backend, endpoint) in self._shapes or endpoint is Endpoint.EMBEDDINGS:
            return
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if isinstance(answer, dict) and isinstance(answer.get("usage"), dict) and _text_choice(answer, endpoint):
            self._shapes[(backend, endpoint)] = answer

    def knows(self, backend: str, endpoint: Endpoint) -> bool:
        return (backend, endpoint) in self._shapes

    def answer(self, backend: str, endpoint: Endpoint, t: Transcript, usage: dict[str, Any] | None) -> bytes:
        """The answer ``backend`` would have written for what ``t`` read."""
        out = copy.deepcopy(self._shapes[(backend, endpoint)])
        for key, value in (("id", t.id), ("created", t.created), ("model", t.model)):
            if value is not None and key in out:
                out[key] = value
        if t.fingerprint is not None and "system_fingerprint" in out:
            out["system_fingerprint"] = t.fingerprint
        choice = out["choices"][0]
        if endpoint is Endpoint.COMPLETIONS:
            choice["text"] = t.text
        else:
            choice["message"]["content"] = t.text
        choice["finish_reason"] = t.finish_reason
        if "stop_reason" in choice:
            choice["stop_reason"] = t.stop_reason
        shape_usage = out["usage"]
        for key in shape_usage:
            if isinstance(shape_usage[key], int) or (isinstance(shape_usage[key], dict) and key in (usage or {})):
                shape_usage[key] = (usage or {}).get(key)
        if isinstance(out.get("timings"), dict) and t.last_timings is not None:
            out["timings"] = t.last_timings  # llama.cpp's: the last part's, as its finish chunk told them
        return orjson.dumps(out)


def collectable(req: InferenceRequest, shapes: Shapes, backend: str) -> bool:
    """May this non-streamed request be streamed upstream, paused, and answered whole?"""
    if req.stream or req.endpoint is Endpoint.EMBEDDINGS or not shapes.knows(backend, req.endpoint):
        return False
    if any(req.body.get(k) for k in _MORE_THAN_TEXT):
        return False
    return resumable(as_stream(req))
