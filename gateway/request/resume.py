"""Pause and resume a streamed generation, so the client sees one uninterrupted response.

When the dispatch script gives a running generation's slot to more urgent work, the
gateway closes the upstream stream (the engine aborts it and frees its KV cache), keeps
the client's stream open with ``: paused`` comment lines, queues a continuation with the
request's original arrival, and — granted again — sends the original body plus the
text so far: on chat, a final assistant message with ``continue_final_message: true``
and ``add_generation_prompt: false`` (vLLM's and SGLang's fields); on completions, the
prompt followed by the text. ``max_tokens`` shrinks by the tokens already produced
(``InferenceRequest.upstream_body``, the one rewrite of a body the gateway sends).

``Transcript`` reads every event the client is sent and stitches the parts into one
response: one ``id`` and ``created``, one role chunk, the content continuing where it
paused, one ``finish_reason``, and usage with the original ``prompt_tokens`` and the
``completion_tokens`` of every part summed. Output tokens are counted exactly where the
engine tells them: such a stream asks for ``continuous_usage_stats`` (vLLM, SGLang), so
each chunk carries the part's running count, which is taken and cut from the chunk
(``,"usage":{...}``, byte for byte what the engine adds) unless the client asked for it
too. An engine that does not tell is counted one token per content event.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway import sse
from gateway.schemas import Carried, Endpoint, InferenceRequest

PAUSED = sse.comment("paused")  # keeps the client's stream (and proxies between) awake
# the running usage an engine adds to a chunk (flat, or with one level of details)
_RUNNING_USAGE = re.compile(rb',"usage": ?\{(?:[^{}]|\{[^{}]*\})*\}')


def _json(event: sse.Event) -> dict[str, Any] | None:
    if not event.data.startswith("{"):
        return None  # [DONE]
    try:
        data = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


class Transcript:
    """What a resumable stream has produced so far, read from the events it relays."""

    def __init__(self, chat: bool, keep_running_usage: bool = False) -> None:
        self.chat = chat
        self.keep_running_usage = keep_running_usage  # the client asked for usage on every chunk
        self._text: list[str] = []
        self.tokens = 0  # output tokens the client has been sent
        self.tool_call = False  # a tool-call delta was seen: it cannot be resumed
        self.id: Any = None
        self.created: Any = None
        self.model: Any = None
        self.fingerprint: str | None = None  # the engine's system_fingerprint, where it sent one
        self.finish_reason: Any = None
        self.stop_reason: Any = None
        self.part = 0  # 0: the first upstream call; n: the n-th continuation
        self.carried = 0  # tokens carried into the current part (sent before it began)

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def resumable(self) -> bool:
        return not self.tool_call

    def progress(self) -> int | None:
        """Output tokens so far, or None while it may not be paused."""
        return self.tokens if self.resumable else None

    def next_part(self) -> None:
        self.part += 1
        self.carried = self.tokens

    def read(self, block: bytes) -> bytes:
        """Take in one relayed block; from the second part on, rewrite it as part of the first."""
        if self.part == 0:
            if b'"usage"' not in block:
                for event in sse.parse(block):
                    if (data := _json(event)) is not None:
                        self._take(data)
                return block
            return b"".join(self._first_part_event(raw) for raw in sse.split_events(block))
        out: list[bytes] = []
        for raw in sse.split_events(block):
            events = sse.parse(raw)
            data = _json(events[0]) if len(events) == 1 else None
            if data is None:
                out.append(raw)  # [DONE], comments: as they are
                continue
            if self._take(data) == "role":
                continue  # the first part already sent the role
            data["id"], data["created"] = self.id, self.created
            usage = data.get("usage")
            if isinstance(usage, dict):
                if data.get("choices") and not self.keep_running_usage:
                    del data["usage"]  # a running count the client did not ask for
                else:
                    data["usage"] = self.summed(usage)
            out.append(sse.data(orjson.dumps(data)))
        return b"".join(out)

    def _first_part_event(self, raw: bytes) -> bytes:
        """One event of the first part, as it came but for a running usage the client
        did not ask for."""
        events = sse.parse(raw)
        data = _json(events[0]) if len(events) == 1 else None
        if data is None:
            return raw
        self._take(data)
        if data.get("choices") and isinstance(data.get("usage"), dict) and not self.keep_running_usage:
            return _RUNNING_USAGE.sub(b"", raw, count=1)
        return raw

    def carry(self) -> Carried:
        """What the next part carries: the text so far and its tokens."""
        return Carried(self.text, self.tokens)

    def summed(self, usage: dict[str, Any]) -> dict[str, Any]:
        """A continuation's usage as the whole response's: the original prompt (the
        continuation's less the text it carried) and every part's completion tokens."""
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        out = dict(usage)
        if isinstance(prompt, int):
            out["prompt_tokens"] = max(0, prompt - self.carried)
        if isinstance(completion, int):
            out["completion_tokens"] = completion + self.carried
        if isinstance(out.get("prompt_tokens"), int) and isinstance(out.get("completion_tokens"), int):
            out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
        return out

    def _take(self, data: dict[str, Any]) -> str:
        """Record one event; what it was: role, content, or other."""
        if self.id is None:
            self.id, self.created, self.model = data.get("id"), data.get("created"), data.get("model")
        if isinstance(fingerprint := data.get("system_fingerprint"), str):
            self.fingerprint = fingerprint
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return "other"
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason, self.stop_reason = choice["finish_reason"], choice.get("stop_reason")
        if self.chat:
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            if delta.get("tool_calls"):
                self.tool_call = True
            text = delta.get("content")
            if not text and delta.get("role") and not choice.get("finish_reason"):
                return "role"
        else:
            text = choice.get("text")
        kind = "other"
        if isinstance(text, str) and text:
            self._text.append(text)
            self.tokens += 1
            kind = "content"
        usage = data.get("usage")
        if isinstance(usage, dict) and isinstance(made := usage.get("completion_tokens"), int):
            self.tokens = self.carried + made  # the engine's own count of this part's tokens
        return kind


# Constrained decoding: the engine's grammar would start over on a continuation, from the
# text so far as if it were part of the prompt, and the output would no longer follow it.
_CONSTRAINED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")


def resumable(req: InferenceRequest) -> bool:
    """Can this request be paused and continued faithfully? A stream of one choice whose
    prompt can carry the text so far (chat messages, or one completions prompt string),
    whose output no grammar constrains."""
    body = req.body
    if not req.stream or body.get("n") not in (None, 1) or body.get("best_of") not in (None, 1):
        return False
    fmt = body.get("response_format")
    if (isinstance(fmt, dict) and fmt.get("type") not in (None, "text")) or any(body.get(k) for k in _CONSTRAINED):
        return False
    if req.endpoint is Endpoint.CHAT:
        return not body.get("continue_final_message") and not body.get("echo")
    return isinstance(body.get("prompt"), str) and not body.get("echo") and not body.get("suffix")
