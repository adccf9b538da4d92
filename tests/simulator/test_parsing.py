"""OpenAI request bodies to ``GenerationRequest``: what changes the simulation is read,
and every bad input is an ``ApiError`` naming its parameter, as vLLM answers."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from simulator.parsing import MAX_N, parse_request
from simulator.protocol import ApiError, Endpoint
from simulator.textgen import Vocabulary

VOCAB = Vocabulary()
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def parse(body: Any, endpoint: Endpoint = Endpoint.CHAT, served: str = "m", max_len: int = 1000, latest: bool = False):  # noqa: ANN201
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return parse_request(endpoint, raw, served, max_len, VOCAB, implicit_latest=latest)


def test_a_chat_request_with_vllms_extensions() -> None:
    req = parse({**CHAT, "max_tokens": 50, "min_tokens": 5, "ignore_eos": True, "stream": True,
                 "stream_options": {"include_usage": True}, "temperature": 0.3, "tools": []})
    assert (req.model, req.stream, req.include_usage, req.max_tokens, req.min_tokens, req.ignore_eos, req.n) == (
        "m", True, True, 50, 5, True, 1)
    assert req.prompt_tokens > 0


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert parse({**CHAT, "max_completion_tokens": 7, "max_tokens": 50}).max_tokens == 7


def test_usage_is_included_only_in_a_stream() -> None:
    assert parse({**CHAT, "stream_options": {"include_usage": True}}).include_usage is False


def test_a_completions_prompt_and_an_ollama_style_name() -> None:
    req = parse({"model": "llama3", "prompt": "Once upon"}, Endpoint.COMPLETIONS, served="llama3:latest", latest=True)
    assert req.model == "llama3" and req.prompt_tokens > 0


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{nope", 400, None),
        ([1], 400, None),
        ({"messages": CHAT["messages"]}, 400, "model"),
        ({**CHAT, "model": "other"}, 404, "model"),
        ({**CHAT, "n": 0}, 400, "n"),
        ({**CHAT, "n": MAX_N + 1}, 400, "n"),
        ({**CHAT, "n": 2, "stream": True}, 400, "n"),
        ({**CHAT, "max_tokens": True}, 400, "max_tokens"),
        ({**CHAT, "max_tokens": 0}, 400, "max_tokens"),
        ({**CHAT, "max_tokens": 3, "min_tokens": 4}, 400, "min_tokens"),
        ({**CHAT, "max_tokens": 999}, 400, "max_tokens"),  # prompt + max_tokens over the context
        ({**CHAT, "stream": "yes"}, 400, "stream"),
        ({**CHAT, "stream": True, "stream_options": "usage"}, 400, "stream_options"),
        ({**CHAT, "continue_final_message": True, "add_generation_prompt": True}, 400, "continue_final_message"),
        ({"model": "m", "messages": []}, 400, "messages"),
    ],
)
def test_bad_input_is_an_api_error_naming_its_parameter(body: Any, status: int, param: str | None) -> None:
    with pytest.raises(ApiError) as caught:
        parse(body)
    assert caught.value.status == status and caught.value.param == param


def test_the_model_name_must_match_exactly_without_implicit_latest() -> None:
    with pytest.raises(ApiError) as caught:
        parse({"model": "llama3", "prompt": "x"}, Endpoint.COMPLETIONS, served="llama3:latest")
    assert caught.value.status == 404 and caught.value.code == "model_not_found"
