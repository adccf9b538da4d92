"""Token ids in a stream: how each engine carries them, how they are hidden from a client
that did not ask, and how a continuation's completions chunks become chat chunks.

A stream that may be paused asks its engine for the ids of the tokens it makes, so that a
continuation can send exactly those tokens back (``resume.py``). The engines tell them
differently (``engines.TOKEN_RESUME``):

- **vLLM** (``return_token_ids``): the prompt's ids on the first chunk, each chunk's own in
  its ``token_ids``; a client that did not ask gets each field as ``null``, as vLLM writes
  it then. A continuation's prompt is the prompt's ids followed by the output's.
- **llama.cpp** (``n_probs: 1`` with ``post_sampling_probs``: the sampled token's id in
  ``logprobs.content[].id``, without the full-vocabulary softmax the pre-sampling
  probabilities would cost): its OpenAI endpoints give no other ids, and none for the
  prompt. The ``logprobs`` are cut again (a chat chunk then has no such field; a
  completions chunk has ``"logprobs":null``). A continuation's prompt is the prompt's text
  followed by the output's ids — a mixed prompt, which llama.cpp tokenises as its chat
  endpoint does (the chat prompt rendered by its ``/apply-template``).

The continuation goes to the completions endpoint; for a chat client its chunks are written
as the chunks the engine's chat endpoint writes, fields in its order.
"""

from __future__ import annotations

import re
from typing import Any

# vLLM: the token ids the gateway asked for (vLLM writes the fields as null when not asked)
_VLLM_IDS = re.compile(rb'"(token_ids|prompt_token_ids)": ?\[[0-9, ]*\]')
_LOGPROBS = b'"logprobs":{'


def hide_vllm_ids(block: bytes) -> bytes:
    """vLLM's chunks as it writes them for a client that did not ask for token ids."""
    return _VLLM_IDS.sub(rb'"\1":null', block)


def logprob_ids(choice: dict[str, Any]) -> list[int] | None:
    """The ids llama.cpp tells in a choice's ``logprobs`` (None: it told none)."""
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None
    ids = [entry.get("id") for entry in content if isinstance(entry, dict)]
    return ids if all(isinstance(i, int) for i in ids) else None


def _value_end(raw: bytes, start: int) -> int:
    """Where the JSON object or array opening at ``start`` ends (just past it); -1 if not."""
    depth, i, n = 0, start, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x22:  # a string: skip it, escapes included
            i += 1
            while i < n and raw[i] != 0x22:
                i += 2 if raw[i] == 0x5C else 1
        elif c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def hide_logprobs(raw: bytes, chat: bool) -> bytes:
    """llama.cpp's chunk as it writes it when no ``logprobs`` were asked: a chat chunk
    without the field, a completions chunk with ``"logprobs":null``."""
    at = raw.find(_LOGPROBS)
    while at >= 0:
        end = _value_end(raw, at + len(_LOGPROBS) - 1)
        if end < 0:
            return raw
        if chat and raw[at - 1:at] == b",":
            raw = raw[:at - 1] + raw[end:]
        else:
            raw = raw[:at] + b'"logprobs":null' + raw[end:]
            at += len(b'"logprobs":null')
        at = raw.find(_LOGPROBS, at)
    return raw


def vllm_chat_chunk(data: dict[str, Any], keep_ids: bool) -> dict[str, Any]:
    """A completions chunk of a continuation as vLLM's chat chunk, its fields in its order."""
    c = data["choices"][0]
    ids = c.get("token_ids") if keep_ids else None
    choice: dict[str, Any] = {"index": c.get("index", 0), "delta": {"content": c.get("text", "")}, "logprobs": None}
    choice["finish_reason"] = c.get("finish_reason")
    if c.get("finish_reason") is not None:
        choice["stop_reason"] = c.get("stop_reason")
    choice["token_ids"] = ids
    out = {"id": None, "object": "chat.completion.chunk", "created": None, "model": data.get("model"),
           "choices": [choice]}
    for key in ("usage", "system_fingerprint"):
        if key in data:
            out[key] = data[key]
    return out


def llamacpp_chat_chunks(data: dict[str, Any]) -> list[dict[str, Any]]:
    """A completions chunk of a continuation as llama.cpp's chat stream writes the same
    moment: a content chunk; at the finish the text left (if any), a finish chunk with an
    empty delta, and the usage on a chunk of its own (``choices: []``); ``timings`` on the
    last of them."""
    c = data["choices"][0]
    text, finish = c.get("text") or "", c.get("finish_reason")

    def chunk(choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"choices": choices, "created": None, "id": None, "model": data.get("model"),
                "system_fingerprint": data.get("system_fingerprint"), "object": "chat.completion.chunk"}

    index = c.get("index", 0)
    out = []
    if text:  # (a token without text, the end of generation's, is no chat event)
        out.append(chunk([{"finish_reason": None, "index": index, "delta": {"content": text}}]))
    if finish is not None:
        out.append(chunk([{"finish_reason": finish, "index": index, "delta": {}}]))
        if "usage" in data:
            out.append(chunk([]) | {"usage": data["usage"]})
    if "timings" in data and out:
        out[-1]["timings"] = data["timings"]
    return out
