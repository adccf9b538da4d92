"""Only the OpenAI request fields the gateway reads or writes; everything else passes through.

The body is parsed once (orjson). It is forwarded byte for byte unless the gateway
must change a field — ``stream_options.include_usage``, the engine's ``priority``, and
for a paused request's next part the text so far and what is left of ``max_tokens``
(``InferenceRequest.upstream_body``, the one rewrite) — and then re-encoded once.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import GatewayError, bad_request


class Endpoint(enum.StrEnum):
    CHAT = "/v1/chat/completions"
    COMPLETIONS = "/v1/completions"
    EMBEDDINGS = "/v1/embeddings"

    @property
    def operation(self) -> str:
        """The OpenTelemetry GenAI operation name."""
        return {"/v1/chat/completions": "chat", "/v1/embeddings": "embeddings"}.get(self.value, "text_completion")


@dataclass(frozen=True, slots=True)
class Carried:
    """What a paused request's next part carries: the text so far, and its output tokens."""

    text: str
    tokens: int
    ids: tuple[int, ...] | None = None  # the token ids to go on from: an exact resume
    # the text they follow (llama.cpp: the prompt, tokenised by the engine; the ids are the
    # output's); None: the ids are the prompt's and the output's (vLLM)
    head: str | None = None

    def as_text(self) -> Carried:
        """The same part resumed from its text (its ids cannot be sent where it goes)."""
        return Carried(self.text, self.tokens)


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    endpoint: Endpoint
    model: str
    stream: bool
    include_usage: bool  # the client asked for the usage chunk
    max_tokens: int | None
    prompt: str  # last user message (chat) or the prompt (completions), for the predictor
    system: str
    prompt_chars: int
    n_messages: int
    body: dict[str, Any]
    raw: bytes
    n: int = 1  # choices asked for

    @property
    def cap(self) -> int | None:
        """The most output tokens it may make: ``max_tokens`` per choice; an embedding
        makes none, so it is capped at one and placed as short work."""
        return 1 if self.endpoint is Endpoint.EMBEDDINGS else self.max_tokens

    def with_model(self, model: str) -> InferenceRequest:
        """The same request for the served name ``model`` (an alias, or Ollama's ``:latest``)."""
        if model == self.model:
            return self
        return dataclasses.replace(self, model=model, body={**self.body, "model": model}, raw=b"")

    def upstream_body(
        self, priority: int | None = None, carried: Carried | None = None, counted: bool = False,
        ids: dict[str, Any] | None = None, timings: bool = False,
    ) -> bytes:
        """The bytes to send upstream: the client's own unless a field must change — the
        usage chunk asked for, the engine's priority, and for a paused request's next part
        the text so far (``carried``) with what is left of its budget. ``counted``: a
        stream that may be paused asks for the running count of its output tokens on
        every chunk (``continuous_usage_stats``: engines merge tokens into one chunk
        when their server falls behind, so chunks are not tokens; ``timings``: llama.cpp's
        count instead, ``timings_per_token``); ``ids``: and for the ids of the tokens it
        makes (the fields that ask the backend's engine for them, ``engines.IDS_ASK``), to
        resume from them. A part that carries token ids goes
        to the completions endpoint (``part_endpoint``) with them as its prompt (after its
        ``head``, where it has one), and asks for the ids again."""
        changes: dict[str, Any] = {}
        body = self.body
        if carried is not None and carried.ids is not None:
            body = {k: v for k, v in body.items() if k not in _CHAT_ONLY}
            changes["prompt"] = list(carried.ids) if carried.head is None else [carried.head, *carried.ids]
            ids = ids or {"return_token_ids": True}
        elif carried is not None and self.endpoint is Endpoint.CHAT:
            messages = [*body["messages"], {"role": "assistant", "content": carried.text}]
            changes.update(messages=messages, continue_final_message=True, add_generation_prompt=False)
        elif carried is not None:
            changes["prompt"] = body["prompt"] + carried.text
        if carried is not None:
            for name in ("max_tokens", "max_completion_tokens"):  # the latter wins, as engines read it
                if isinstance(self.body.get(name), int):
                    changes["max_tokens" if carried.ids is not None else name] = max(1, self.body[name] - carried.tokens)
        counted = self.stream and (counted or carried is not None)
        if self.stream and (not self.include_usage or counted and not timings):
            options = dict(body.get("stream_options") or {})
            options["include_usage"] = True
            if counted and not timings:
                options["continuous_usage_stats"] = True
            changes["stream_options"] = options
        if counted and timings:
            changes["timings_per_token"] = True
        if counted and ids:
            changes.update(ids)
        if priority is not None:
            changes["priority"] = priority
        if not changes and self.raw:
            return self.raw
        return orjson.dumps({**body, **changes})

    def part_endpoint(self, carried: Carried | None) -> Endpoint:
        """Where a part goes: a continuation from token ids to the completions endpoint."""
        return Endpoint.COMPLETIONS if carried is not None and carried.ids is not None else self.endpoint


# a chat request's fields that a completions request does not take (its prompt is token ids)
_CHAT_ONLY = frozenset({
    "messages", "add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs",
    "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "documents",
    "max_completion_tokens", "reasoning_effort", "include_reasoning", "mm_processor_kwargs", "echo",
})


def _text(content: Any) -> str:
    """Text of a message's content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _max_tokens(body: dict[str, Any], limit: int) -> int | None:
    value = None
    param = "max_tokens"
    for field in ("max_completion_tokens", "max_tokens"):
        if body.get(field) is not None:
            value, param = body[field], field
            break
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{param}' must be an integer", param, "invalid_type")
    if value < 1:
        raise bad_request(f"'{param}' must be at least 1, got {value}", param, "invalid_value")
    if value > limit:
        raise bad_request(f"'{param}' of {value} is above this gateway's limit of {limit}", param, "invalid_value")
    return value


def _chat_prompt(body: dict[str, Any]) -> tuple[str, str, int, int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array of messages", "messages")
    system, last_user, chars = "", "", 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise bad_request(f"messages[{i}] must be an object with a 'role'", f"messages[{i}]")
        text = _text(msg.get("content"))
        chars += len(text)
        if msg["role"] in ("system", "developer") and not system:
            system = text
        elif msg["role"] == "user":
            last_user = text
    return last_user, system, chars, len(messages)


MAX_N = 128  # choices one request may ask for (OpenAI's bound)


def _n(body: dict[str, Any]) -> int:
    value = body.get("n")
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request("'n' must be an integer", "n", "invalid_type")
    if not 1 <= value <= MAX_N:
        raise bad_request(f"'n' must be between 1 and {MAX_N}, got {value}", "n", "invalid_value")
    return value


def _embedding_input(body: dict[str, Any]) -> tuple[str, str, int, int]:
    value = body.get("input")
    if isinstance(value, str) and value:
        return value, "", len(value), 1
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return value[0], "", sum(len(v) for v in value), len(value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return "", "", 4 * len(value), 1  # token ids
        if all(isinstance(v, list) and all(isinstance(t, int) for t in v) for v in value):
            return "", "", 4 * sum(len(v) for v in value), len(value)
    raise bad_request("'input' must be a non-empty string, array of strings, or array of token ids", "input")


def _completion_prompt(body: dict[str, Any]) -> tuple[str, str, int, int]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt, "", len(prompt), 1
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return prompt[0], "", sum(len(p) for p in prompt), len(prompt)
        if all(isinstance(p, int) for p in prompt) or all(isinstance(p, list) for p in prompt):
            return "", "", 4 * len(prompt), 1  # token ids: no text to read
    raise bad_request("'prompt' must be a string or an array of strings or token ids", "prompt")


MAX_DEPTH = 128  # JSON nesting a body may have: the gateway must be able to re-encode it


def _too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Does ``value`` nest arrays and objects more than ``limit`` levels deep?"""
    level: list[tuple[Any, int]] = [(value, 1)]
    while level:
        item, depth = level.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        level.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse(raw: bytes, endpoint: Endpoint, max_tokens_limit: int) -> InferenceRequest:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_request(
            "We could not parse the JSON body of your request. The body must be valid JSON.",
            code="invalid_json",
        ) from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    if _too_deep(body):
        raise bad_request(f"The request body nests arrays and objects more than {MAX_DEPTH} levels deep.",
                          code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("You must provide a model parameter.", "model", "missing_model")
    if endpoint is Endpoint.EMBEDDINGS:  # one answer, never streamed, no output tokens
        prompt, system, chars, n = _embedding_input(body)
        return InferenceRequest(endpoint, model, False, False, None, prompt, system, chars, n, body, raw)
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean", "stream", "invalid_type")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options", "invalid_type")
    include_usage = bool(options and options.get("include_usage"))
    max_tokens = _max_tokens(body, max_tokens_limit)
    choices = _n(body)
    extract = _chat_prompt if endpoint is Endpoint.CHAT else _completion_prompt
    prompt, system, chars, n = extract(body)
    return InferenceRequest(
        endpoint, model, bool(stream), include_usage, max_tokens, prompt, system, chars, n, body, raw, choices
    )


MAX_HEADER_DIGITS = 12  # a bound on every integer header: no overflow downstream


def parse_int_header(value: str | None, name: str, minimum: int = 1) -> int | None:
    """A non-negative decimal integer header: digits only (no sign, spaces or ``_``)."""
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > MAX_HEADER_DIGITS:
        raise GatewayError(
            400, f"header {name} must be a whole number of at most {MAX_HEADER_DIGITS} digits", param=name
        )
    number = int(value)
    if number < minimum:
        raise GatewayError(400, f"header {name} must be at least {minimum}", param=name)
    return number
