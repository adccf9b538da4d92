"""OpenAI request bodies to ``GenerationRequest``; the one place bad input becomes ``ApiError``.

Only the fields that change the simulator's behaviour are read; everything else
(temperature, top_p, tools, ...) is accepted and ignored, as a real server would
accept and apply them.
"""

from __future__ import annotations

from typing import Any

import orjson

from simulator.lengths import estimate_prompt_tokens
from simulator.protocol import ApiError, Endpoint, GenerationRequest


def parse_request(endpoint: Endpoint, raw: bytes, served_model: str, max_model_len: int) -> GenerationRequest:
    """Validate one request body. Raises ``ApiError`` (400, or 404 for an unknown model)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError(400, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")

    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "Missing required parameter: 'model'.", param="model")
    if model != served_model:
        raise ApiError(
            404,
            f"The model `{model}` does not exist.",
            type="NotFoundError",
            param="model",
            code="model_not_found",
        )

    if endpoint is Endpoint.CHAT:
        prompt_text, prompt_tokens = _chat_prompt(body.get("messages"))
    else:
        prompt_text, prompt_tokens = _completion_prompt(body.get("prompt"))

    n = body.get("n", 1)
    if n not in (1, None):
        raise ApiError(400, "Only n=1 is supported.", param="n")

    max_tokens = _optional_int(body, "max_completion_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = _optional_int(body, "max_tokens", minimum=1)
    min_tokens = _optional_int(body, "min_tokens", minimum=0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise ApiError(400, "min_tokens must be less than or equal to max_tokens.", param="min_tokens")

    if prompt_tokens >= max_model_len or (
        max_tokens is not None and prompt_tokens + max_tokens > max_model_len
    ):
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + (max_tokens or 0)} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens or 0} in the completion).",
            param="max_tokens",
        )

    stream = _optional_bool(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise ApiError(400, "stream_options must be an object.", param="stream_options")
        include_usage = bool(options.get("include_usage", False))

    return GenerationRequest(
        endpoint=endpoint,
        model=model,
        stream=stream,
        include_usage=include_usage and stream,
        prompt_text=prompt_text,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_optional_bool(body, "ignore_eos"),
    )


def _chat_prompt(messages: Any) -> tuple[str, int]:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "Missing required parameter: 'messages'.", param="messages")
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, "Each message must be an object with a 'role'.", param="messages")
        parts.append(message["role"])
        parts.append(_content_text(message.get("content")))
    text = "\n".join(parts)
    # Only the content counts toward the estimate; roles are part of the hash key so that
    # the same words as system prompt and as user turn are different prompts.
    chars = sum(len(p) for p in parts[1::2])
    return text, estimate_prompt_tokens(chars)


def _content_text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(texts)
    raise ApiError(400, "Message content must be a string or a list of parts.", param="messages")


def _completion_prompt(prompt: Any) -> tuple[str, int]:
    if isinstance(prompt, str):
        return prompt, estimate_prompt_tokens(len(prompt))
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0], estimate_prompt_tokens(len(prompt[0]))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        # Token ids: the count is exact; the ids themselves key the output length.
        return ",".join(map(str, prompt)), len(prompt)
    raise ApiError(
        400, "Missing or unsupported 'prompt': send a string or a list of token ids.", param="prompt"
    )


def _optional_int(body: dict[str, Any], name: str, *, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError(400, f"'{name}' must be an integer >= {minimum}.", param=name)
    return value


def _optional_bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be a boolean.", param=name)
    return value
