"""llama.cpp's own response shapes, for the simulator's ``llamacpp`` dialect.

What llama-server (0.6) writes beyond OpenAI's shapes (recorded from a running llama-server
in ``tests/simulator/data/llamacpp-shapes.json``, which ``tests/engines/test_llamacpp.py``
checks against one):

- fields in llama.cpp's order: a chunk starts with ``choices`` and ends with ``object``
  (completions: then ``id``); a chat choice is ``finish_reason, index, delta``, the role
  chunk's delta ``{"role":"assistant","content":null}``; ``system_fingerprint`` on every
  chunk;
- ``n_probs`` (its own field) adds each sampled token's ``logprobs``: ``{"content":[{"id",
  "token", "bytes", "logprob", "top_logprobs"}]}``, or ``prob`` and ``top_probs`` with
  ``post_sampling_probs``. Unasked, a chat chunk has no such field and a completions chunk
  ``"logprobs":null``. The ids are the simulator's (``simulator/token_ids.py``): the
  model is certain of each word (probability 1);
- ``timings`` (``cache_n``, ``prompt_n``, ``predicted_n``, their times) on the last chunk
  always, and on every token's chunk with ``timings_per_token``;
- the finish on a chunk of its own (chat ``delta: {}``; completions empty text, with the
  usage whether asked or not); chat's usage on a ``choices: []`` chunk when asked. Usage
  fields in the order completion, prompt, total, then ``prompt_tokens_details.cached_tokens``
  (the prompt tokens its cache held), ``prompt_tokens`` being ``prompt_n + cache_n``.
"""

from __future__ import annotations

from typing import Any

import orjson

from simulator.encoding import StreamSpec
from simulator.protocol import Endpoint, FinishReason
from simulator.sequence import Sequence
from simulator.token_ids import word_id

FINGERPRINT = b'"b0-triage-simulator"'


def timings(seq: Sequence, predicted: int) -> dict[str, Any]:
    """llama.cpp's ``timings`` of ``seq`` after ``predicted`` output tokens."""
    prompt_n = seq.prefill_computed
    cache_n = max(0, seq.prompt_tokens - prompt_n)
    prompt_ms = 1000 * ((seq.first_token_at or 0.0) - (seq.scheduled_at or seq.first_token_at or 0.0))
    predicted_ms = 1000 * ((seq.last_token_at or 0.0) - (seq.first_token_at or 0.0)) if predicted > 1 else 0.0
    return {
        "cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": predicted, "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted if predicted else 0.0,
        "predicted_per_second": 1000 * predicted / predicted_ms if predicted_ms > 0 else 0.0,
    }  # fmt: skip


def usage(seq: Sequence, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    cached = max(0, prompt_tokens - seq.prefill_computed)
    return {"completion_tokens": completion_tokens, "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": cached}}


class LlamacppFrameWriter:
    """The SSE frames of one streamed response, as llama-server writes them (the
    interface of ``encoding.FrameWriter``); ``seq``: the sequence, for its timings."""

    __slots__ = ("_chat", "_vocab", "_start", "_seq", "_data", "_end", "done", "_fields", "_id", "_probs", "_post",
                 "_per_token", "_include_usage")

    def __init__(
        self, spec: StreamSpec, seq: Sequence, n_probs: int = 0, post_sampling_probs: bool = False,
        timings_per_token: bool = False,
    ) -> None:
        self._chat = spec.endpoint is Endpoint.CHAT
        self._vocab = spec.vocab
        self._start = spec.start
        self._seq = seq
        self._data, self._end, self.done = spec.wire.data, spec.wire.end, spec.wire.done
        rid, name, created = orjson.dumps(spec.request_id), orjson.dumps(spec.model), spec.created
        if self._chat:  # the id among the fields; completions: after the usage
            self._fields = b',"created":%d,"id":%s,"model":%s,"system_fingerprint":%s,"object":"chat.completion.chunk"' % (
                created, rid, name, FINGERPRINT)  # fmt: skip
            self._id = b""
        else:
            self._fields = b',"created":%d,"model":%s,"system_fingerprint":%s,"object":"text_completion"' % (
                created, name, FINGERPRINT)  # fmt: skip
            self._id = b',"id":' + rid
        self._probs = n_probs
        self._post = post_sampling_probs
        self._per_token = timings_per_token
        self._include_usage = spec.include_usage

    def _chunk(self, choices: bytes, usage: bytes = b"", timings: bytes = b"") -> bytes:
        """One event: ``choices``, then the chunk's fields, the usage and the timings in llama.cpp's places."""
        return self._data + b'{"choices":' + choices + self._fields + usage + self._id + timings + b"}" + self._end

    def _timings(self, predicted: int) -> bytes:
        return b',"timings":' + orjson.dumps(timings(self._seq, predicted))

    def _logprobs(self, i: int) -> bytes:
        word = (self._start + i) % len(self._vocab)
        text = self._vocab.words[word]
        entry: dict[str, Any] = {"id": word_id(word), "token": text, "bytes": list(text.encode())}
        alternatives = []
        for k in range(self._probs):  # the sampled word, then the words after it (never chosen)
            w = (word + k) % len(self._vocab)
            alt = self._vocab.words[w]
            p = 1.0 if k == 0 else 0.0
            alternatives.append({"id": word_id(w), "token": alt, "bytes": list(alt.encode()),
                                 **({"prob": p} if self._post else {"logprob": 0.0 if k == 0 else -100.0})})
        entry |= {"prob": 1.0, "top_probs": alternatives} if self._post else {"logprob": 0.0, "top_logprobs": alternatives}
        return orjson.dumps({"content": [entry]})

    def role(self) -> bytes:
        """The first chat frame; completions have none."""
        if not self._chat:
            return b""
        return self._chunk(b'[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}]')

    def _token(self, i: int) -> bytes:
        text = self._vocab.json_word(self._start, i)
        timings = self._timings(i + 1) if self._per_token else b""
        if self._chat:
            logprobs = b',"logprobs":' + self._logprobs(i) if self._probs else b""
            choice = b'[{"finish_reason":null,"index":0,"delta":{"content":' + text + b"}" + logprobs + b"}]"
        else:
            logprobs = self._logprobs(i) if self._probs else b"null"
            choice = b'[{"text":' + text + b',"index":0,"logprobs":' + logprobs + b',"finish_reason":null}]'
        return self._chunk(choice, timings=timings)

    def tokens(self, first: int, end: int) -> bytes:
        """Content frames for output tokens ``first`` .. ``end - 1``, one token each."""
        return b"".join(self._token(i) for i in range(first, end))

    def end(self, first: int, end: int, reason: FinishReason, usage_of: tuple[int, int] | None = None) -> bytes:
        """The last content frames, then the finish (with the usage on completions, and
        the timings unless a usage chunk follows)."""
        finish = str(reason).encode()
        last_timings = self._timings(end)
        if self._chat:
            closing = b"" if self._include_usage else last_timings
            out = self._chunk(b'[{"finish_reason":"%s","index":0,"delta":{}}]' % finish, timings=closing)
        else:
            counts = usage(self._seq, *(usage_of or (self._seq.prompt_tokens, end)))
            out = self._chunk(b'[{"text":"","index":0,"logprobs":null,"finish_reason":"%s"}]' % finish,
                              b',"usage":' + orjson.dumps(counts), last_timings)
        return self.tokens(first, end) + out

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """Chat's usage chunk (``choices: []``), with the timings."""
        counts = orjson.dumps(usage(self._seq, prompt_tokens, completion_tokens))
        return self._chunk(b"[]", b',"usage":' + counts, self._timings(completion_tokens))


def full_response(
    endpoint: Endpoint,
    request_id: str,
    created: int,
    model: str,
    choices: list[tuple[str, FinishReason]],
    seq: Sequence,
    prompt_tokens: int,
    completion_tokens: int,
) -> bytes:
    """A non-streamed answer in llama.cpp's shape: one (text, finish reason) per choice,
    the timings of ``seq`` (the first choice's)."""
    out: list[dict[str, Any]] = []
    for i, (text, finish) in enumerate(choices):
        if endpoint is Endpoint.CHAT:
            out.append({"finish_reason": str(finish), "index": i, "message": {"role": "assistant", "content": text}})
        else:
            out.append({"text": text, "index": i, "logprobs": None, "finish_reason": str(finish)})
    body = {
        "choices": out, "created": created, "model": model, "system_fingerprint": orjson.loads(FINGERPRINT),
        "object": "chat.completion" if endpoint is Endpoint.CHAT else "text_completion",
        "usage": usage(seq, prompt_tokens, completion_tokens), "id": request_id,
        "timings": timings(seq, seq.generated),
    }  # fmt: skip
    return orjson.dumps(body)
