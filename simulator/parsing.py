"""OpenAI request bodies to ``GenerationRequest``; the one place bad input becomes ``ApiError``.

Only the fields that change the simulator's behaviour are read; everything else
(temperature, top_p, tools, ...) is accepted and ignored, as a real server would
accept and apply them.
"""

from __future__ import annotations

from typing import Any

import orjson

from simulator.prompts import chat_prompt, completion_prompt
from simulator.protocol import ApiError, Endpoint, GenerationRequest
from simulator.textgen import Vocabulary

MAX_N = 128  # choices one request may ask for (OpenAI's bound)


def parse_request(
    endpoint: Endpoint, raw: bytes, served_model: str, max_model_len: int, vocab: Vocabulary,
    implicit_latest: bool = False, llamacpp: bool = False,
) -> GenerationRequest:
    """Validate one request body. Raises ``ApiError`` (400, or 404 for an unknown model).

    ``implicit_latest``: the bare name of a ``name:latest`` model is that model (Ollama).
    ``llamacpp``: llama.cpp's fields are read (``n_probs``, ``post_sampling_probs``,
    ``timings_per_token``; a completions prompt of text then token ids)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError(400, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")

    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "Missing required parameter: 'model'.", param="model")
    if model != served_model and not (implicit_latest and model + ":latest" == served_model):
        raise ApiError(
            404,
            f"The model `{model}` does not exist.",
            type="NotFoundError",
            param="model",
            code="model_not_found",
        )

    if endpoint is Endpoint.CHAT:
        prompt = chat_prompt(body.get("messages"), _continue_final_message(body), vocab)
    else:
        prompt = completion_prompt(body.get("prompt"), vocab, mixed=llamacpp)
    prompt_tokens = prompt.tokens

    n = _optional_int(body, "n", minimum=1) or 1
    if n > MAX_N:
        raise ApiError(400, f"'n' must be at most {MAX_N}.", param="n")

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
    if stream and n > 1:
        raise ApiError(400, "Streaming with n > 1 is not simulated.", param="n")
    options = body.get("stream_options")
    include_usage = running_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise ApiError(400, "stream_options must be an object.", param="stream_options")
        include_usage = bool(options.get("include_usage", False))
        running_usage = include_usage and bool(options.get("continuous_usage_stats", False))

    return GenerationRequest(
        endpoint=endpoint,
        model=model,
        stream=stream,
        include_usage=include_usage and stream,
        prompt=prompt,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_optional_bool(body, "ignore_eos"),
        n=n,
        token_ids=_optional_bool(body, "return_token_ids"),
        running_usage=running_usage and stream,
        n_probs=(_optional_int(body, "n_probs", minimum=0) or 0) if llamacpp else 0,
        post_sampling_probs=llamacpp and _optional_bool(body, "post_sampling_probs"),
        timings_per_token=llamacpp and _optional_bool(body, "timings_per_token"),
    )


def _continue_final_message(body: dict[str, Any]) -> bool:
    """vLLM's chat-template switches: continue the last (assistant) message instead of a new turn.

    vLLM defaults ``add_generation_prompt`` to true but refuses only an explicit true next
    to ``continue_final_message``; the simulator does the same.
    """
    cont = _optional_bool(body, "continue_final_message")
    if _optional_bool(body, "add_generation_prompt") and cont:
        raise ApiError(
            400,
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            param="continue_final_message",
        )
    return cont


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
