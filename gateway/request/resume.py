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
too. llama.cpp tells its count in ``timings.predicted_n`` (asked on every chunk with
``timings_per_token``; cut again from all but the finish chunk, which carries them
unasked), and its usage on a completions finish chunk is its own, never cut. An engine
that does not tell is counted one token per content event.

Where the backend's engine can (``engines.TOKEN_RESUME``: vLLM, llama.cpp) and the
request allows (``by_ids``: no stop strings, whose held-back text lags the tokens; no
logprobs), the stream also asks for the ids of the tokens it makes (``token_ids.py``: how
each engine tells them). A continuation then sends them back as a ``/v1/completions``
prompt — after the prompt's ids (vLLM) or the prompt's text (llama.cpp) — so the engine
reads exactly the tokens it made, its prefix cache holds them and greedy decoding goes on
as if never paused; the transcript writes that stream's chunks as the chat chunks the
engine would have sent. The ids are shown to a client only if it asked for them. A stream
that did not carry every id (an engine that ignores the field, a token whose text was
never sent) resumes from its text.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway import sse
from gateway.request import token_ids
from gateway.schemas import Carried, Endpoint, InferenceRequest

PAUSED = sse.comment("paused")  # keeps the client's stream (and proxies between) awake
# the running usage an engine adds to a chunk (flat, or with one level of details)
_RUNNING_USAGE = re.compile(rb',"usage": ?\{(?:[^{}]|\{[^{}]*\})*\}')
# llama.cpp's timings on a chunk (flat)
_TIMINGS = re.compile(rb',"timings": ?\{[^{}]*\}')


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

    def __init__(
        self, chat: bool, keep_running_usage: bool = False, ids: bool = False, keep_ids: bool = False,
        timings: bool = False, keep_timings: bool = False, logprob_ids: bool = False,
    ) -> None:
        self.chat = chat
        self.keep_running_usage = keep_running_usage  # the client asked for usage on every chunk
        self.ids_asked = ids  # the gateway asked for token ids, to resume from them
        self.keep_ids = keep_ids  # the client asked for them too
        self.logprob_ids = logprob_ids  # they come in logprobs (llama.cpp), never with the prompt's
        self.prompt_ids: list[int] | None = None  # the prompt's token ids, from the first chunk
        self.ids: list[int] = []  # the output's token ids so far
        self.ids_whole = True  # every event that carried output carried its ids
        self.ids_shown = 0  # of them, those whose text the client has (the rest is held back)
        self.from_ids = False  # the current part continues from token ids (a completions stream)
        self.timings = timings  # the engine counts in llama.cpp's timings (predicted_n), asked on every chunk
        self.keep_timings = keep_timings  # the client asked for them on every chunk too
        self._text: list[str] = []
        self.tokens = 0  # output tokens the client has been sent
        self.tool_call = False  # a tool-call delta was seen: it cannot be resumed
        self.id: Any = None
        self.created: Any = None
        self.model: Any = None
        self.fingerprint: str | None = None  # the engine's system_fingerprint, where it sent one
        self.finish_reason: Any = None
        self.stop_reason: Any = None
        self.prompt_tokens: int | None = None  # the original prompt's, where the first part told it
        self.prompt_cached: int | None = None  # of them, those the engine's cache held (llama.cpp's cache_n)
        self.last_timings: dict[str, Any] | None = None  # llama.cpp's timings, as the last chunk told them
        self.part = 0  # 0: the first upstream call; n: the n-th continuation
        self.carried = 0  # tokens carried into the current part (sent before it began)

    @classmethod
    def of(cls, req: InferenceRequest, ids: bool, timings: bool, logprob_ids: bool = False) -> Transcript:
        """The transcript of ``req``'s stream: ``ids``, ``timings``: what the gateway asked the
        engine for (``logprob_ids``: the ids in llama.cpp's logprobs); what the client asked
        for itself is read from its body."""
        body = req.body
        options = body.get("stream_options") or {}
        return cls(
            req.endpoint is Endpoint.CHAT, bool(options.get("continuous_usage_stats")), ids,
            bool(body.get("return_token_ids")), timings, bool(body.get("timings_per_token")), ids and logprob_ids,
        )

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def resumable(self) -> bool:
        return not self.tool_call

    def progress(self) -> int | None:
        """Output tokens so far, or None while it may not be paused."""
        return self.tokens if self.resumable else None

    def next_part(self) -> Carried:
        """The stream paused: what its next part carries (the text so far and its tokens,
        and the token ids where every one of them is known)."""
        ids = None
        known_prompt = self.logprob_ids or bool(self.prompt_ids)  # (llama.cpp's is sent as text)
        if self.ids_asked and self.ids_whole and known_prompt and len(self.ids) == self.tokens:
            # tokens whose text the engine held back (part of a character) are made again
            del self.ids[self.ids_shown:]
            self.tokens = len(self.ids)
            ids = tuple(self.ids) if self.logprob_ids else tuple((self.prompt_ids or []) + self.ids)
        carried = Carried(self.text, self.tokens, ids)
        self.part += 1
        self.carried = self.tokens
        self.from_ids = carried.ids is not None
        return carried

    def goes_on(self, carried: Carried) -> None:
        """The next part goes on as ``carried`` says (from its token ids, or from its text
        where they cannot be sent where it goes)."""
        self.from_ids = carried.ids is not None

    def read(self, block: bytes) -> bytes:
        """Take in one relayed block; from the second part on, rewrite it as part of the first."""
        if self.part == 0:
            if b'"usage"' in block or (self.timings and not self.keep_timings and b'"timings"' in block):
                block = b"".join(self._first_part_event(raw) for raw in sse.split_events(block))
            else:
                for event in sse.parse(block):
                    if (data := _json(event)) is not None:
                        self._take(data)
            if self.logprob_ids:
                return token_ids.hide_logprobs(block, self.chat)  # (a client that asked has no ids asked)
            return token_ids.hide_vllm_ids(block) if self.ids_asked and not self.keep_ids else block
        out: list[bytes] = []
        for raw in sse.split_events(block):
            events = sse.parse(raw)
            data = _json(events[0]) if len(events) == 1 else None
            if data is None:
                out.append(raw)  # [DONE], comments: as they are
                continue
            if self._take(data) == "role":
                continue  # the first part already sent the role
            for chunk in self._from_ids(data) if self.from_ids else (data,):
                chunk["id"], chunk["created"] = self.id, self.created
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    if chunk.get("choices") and not self.keep_running_usage and not self.timings:
                        del chunk["usage"]  # a running count the client did not ask for
                    else:
                        chunk["usage"] = self.summed(usage)
                if self.timings and not self.keep_timings and "timings" in chunk and not _last(chunk):
                    del chunk["timings"]
                out.append(sse.data(orjson.dumps(chunk)))
        return b"".join(out)

    def _first_part_event(self, raw: bytes) -> bytes:
        """One event of the first part, as it came but for a running usage the client
        did not ask for."""
        events = sse.parse(raw)
        data = _json(events[0]) if len(events) == 1 else None
        if data is None:
            return raw
        self._take(data)
        if data.get("choices") and isinstance(data.get("usage"), dict) and not self.keep_running_usage and not self.timings:
            raw = _RUNNING_USAGE.sub(b"", raw, count=1)  # (llama.cpp's usage on a finish chunk is its own)
        if self.timings and not self.keep_timings and "timings" in data and not _last(data):
            raw = _TIMINGS.sub(b"", raw, count=1)  # a finish chunk carries them unasked
        return raw

    def _from_ids(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """A chunk of a continuation from token ids (a completions stream) as the first
        part's endpoint writes it: for chat, the engine's chat chunks (``token_ids.py``);
        for completions, the same chunk. Ids only where the client asked for them."""
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            if self.chat and "object" in data:  # the usage chunk
                data["object"] = "chat.completion.chunk"
            return [data]
        c = choices[0]
        if self.logprob_ids:
            if not self.chat:
                c["logprobs"] = None
                return [data]
            return token_ids.llamacpp_chat_chunks(data)
        if not self.chat:
            c["prompt_token_ids"], c["token_ids"] = None, c.get("token_ids") if self.keep_ids else None
            return [data]
        return [token_ids.vllm_chat_chunk(data, self.keep_ids)]

    def summed(self, usage: dict[str, Any]) -> dict[str, Any]:
        """A continuation's usage as the whole response's: the original prompt (the
        continuation's less the text it carried) and every part's completion tokens."""
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        out = dict(usage)
        if self.prompt_tokens is not None and isinstance(prompt, int):
            out["prompt_tokens"] = self.prompt_tokens  # a text re-tokenised may not be the tokens made
        elif isinstance(prompt, int):
            out["prompt_tokens"] = max(0, prompt - self.carried)
        if isinstance(completion, int):
            out["completion_tokens"] = completion + self.carried
        if isinstance(out.get("prompt_tokens"), int) and isinstance(out.get("completion_tokens"), int):
            out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
        details = out.get("prompt_tokens_details")
        if isinstance(details, dict) and "cached_tokens" in details and self.prompt_cached is not None:
            out["prompt_tokens_details"] = details | {"cached_tokens": self.prompt_cached}  # the prompt's, not the text's
        return out

    def _take(self, data: dict[str, Any]) -> str:
        """Record one event; what it was: role, content, or other."""
        if self.id is None:
            self.id, self.created, self.model = data.get("id"), data.get("created"), data.get("model")
        if self.part == 0 and isinstance(prompt_ids := data.get("prompt_token_ids"), list):
            self.prompt_ids = prompt_ids  # chat: on the first chunk
        if isinstance(fingerprint := data.get("system_fingerprint"), str):
            self.fingerprint = fingerprint
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return "other"
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason, self.stop_reason = choice["finish_reason"], choice.get("stop_reason")
        if self.part == 0 and isinstance(prompt_ids := choice.get("prompt_token_ids"), list):
            self.prompt_ids = prompt_ids  # completions: in the first chunk's choice
        if self.chat and not self.from_ids:
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            if delta.get("tool_calls"):
                self.tool_call = True
            if delta.get("reasoning") or delta.get("reasoning_content"):
                self.ids_whole = False  # a reasoning parser reads the tokens: only the text resumes
            text = delta.get("content")
            if not text and delta.get("role") and not choice.get("finish_reason"):
                return "role"
        else:
            text = choice.get("text")
        if isinstance(ids := token_ids.logprob_ids(choice) if self.logprob_ids else choice.get("token_ids"), list):
            self.ids.extend(ids)
        elif text:
            self.ids_whole = False
        kind = "other"
        if isinstance(text, str) and text:
            self._text.append(text)
            self.tokens += 1
            self.ids_shown = len(self.ids)
            kind = "content"
        usage = data.get("usage")
        if isinstance(usage, dict) and isinstance(made := usage.get("completion_tokens"), int):
            self.tokens = self.carried + made  # the engine's own count of this part's tokens
            if self.part == 0 and isinstance(prompt := usage.get("prompt_tokens"), int):
                self.prompt_tokens = prompt
        timings = data.get("timings")
        if self.timings and isinstance(timings, dict) and isinstance(made := timings.get("predicted_n"), int):
            self.tokens = self.carried + made  # llama.cpp's
            self.last_timings = timings
            read, cached = timings.get("prompt_n"), timings.get("cache_n")
            if self.part == 0 and isinstance(read, int) and isinstance(cached, int):
                self.prompt_tokens, self.prompt_cached = read + cached, cached
        return kind


# Constrained decoding: the engine's grammar would start over on a continuation, from the
# text so far as if it were part of the prompt, and the output would no longer follow it.
_CONSTRAINED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")


def _last(data: dict[str, Any]) -> bool:
    """The finish chunk, or the usage chunk after it (``choices: []``): where llama.cpp puts
    its timings unasked."""
    choices = data.get("choices")
    if choices == []:
        return True
    return bool(choices) and isinstance(choices, list) and isinstance(choices[0], dict) and bool(choices[0].get("finish_reason"))


def by_ids(req: InferenceRequest) -> bool:
    """May a continuation of this resumable request start from token ids? Not with stop
    strings (the engine holds back text that may begin one, so the text sent lags the
    tokens made) or logprobs (asked for differently on the two endpoints)."""
    body = req.body
    return not body.get("stop") and not any(body.get(k) for k in ("logprobs", "top_logprobs", "prompt_logprobs"))


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
