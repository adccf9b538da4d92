"""Pause and resume: a stream cut by its client and continued gives the uncut stream, exactly.

A continuation is what a gateway sends after closing a running stream: on chat, the
original messages plus an assistant message with the text so far and
``continue_final_message``; on completions, the original prompt plus the text so far.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from simulator.lengths import natural_length, prompt_hash
from simulator.profiles import FAST
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.simulator.conftest import MODEL, parse_metrics, wait_for_stats

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def fast_natural(key: str) -> int:
    return natural_length(prompt_hash(key, FAST.seed), FAST.median_output_tokens, FAST.output_sigma, 10**6)


def chat_content_of_length(low: int) -> str:
    """A user message whose natural reply (fast profile) has at least ``low`` tokens."""
    return next(
        c for c in (f"Explain queue {i}." for i in range(10_000)) if fast_natural(f"user\n{c}") >= low
    )


def completion_prompt_of_length(low: int) -> str:
    return next(p for p in (f"Story number {i}:" for i in range(10_000)) if fast_natural(p) >= low)


async def stream(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], cut: int | None = None
) -> tuple[str, dict[str, int] | None, str | None]:
    """Stream a reply: its text, usage and finish reason. With ``cut``, close after that many tokens."""
    body = {**body, "model": MODEL, "stream": True, "stream_options": {"include_usage": True}}
    pieces: list[str] = []
    usage = finish = None
    async with http.stream("POST", path, json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            frame = orjson.loads(line[6:])
            usage = frame.get("usage") or usage
            for choice in frame["choices"]:
                text = choice["delta"].get("content") if path == CHAT else choice["text"]
                if text:
                    pieces.append(text)
                finish = choice["finish_reason"] or finish
            if cut is not None and len(pieces) == cut:
                break  # leaving the block closes the connection: the engine aborts the request
    return "".join(pieces), usage, finish


def chat_continuation(messages: list[dict[str, str]], so_far: str, max_tokens: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [*messages, {"role": "assistant", "content": so_far}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    return body | ({"max_tokens": max_tokens} if max_tokens else {})


@pytest.mark.parametrize(("k", "max_tokens"), [(1, None), (6, None), (9, 12)])
async def test_a_chat_stream_cut_and_continued_is_the_uncut_stream(
    http: httpx.AsyncClient, k: int, max_tokens: int | None
) -> None:
    messages = [{"role": "user", "content": chat_content_of_length(16)}]
    limit = {"max_tokens": max_tokens} if max_tokens else {}
    full, usage, finish = await stream(http, CHAT, {"messages": messages, **limit})
    assert usage is not None and finish == ("length" if max_tokens else "stop")

    so_far, _, _ = await stream(http, CHAT, {"messages": messages, **limit}, cut=k)
    rest, rest_usage, rest_finish = await stream(
        http, CHAT, chat_continuation(messages, so_far, max_tokens - k if max_tokens else None)
    )
    assert (so_far + rest).encode() == full.encode()
    assert rest_finish == finish
    assert rest_usage is not None
    assert k + rest_usage["completion_tokens"] == usage["completion_tokens"]
    assert (
        rest_usage["prompt_tokens"] == usage["prompt_tokens"] + k
    )  # the original prompt and the text so far


@pytest.mark.parametrize(("k", "max_tokens"), [(1, None), (6, None), (9, 12)])
async def test_a_completions_stream_cut_and_continued_from_prompt_plus_text_is_the_uncut_stream(
    http: httpx.AsyncClient, k: int, max_tokens: int | None
) -> None:
    prompt = completion_prompt_of_length(16)
    limit = {"max_tokens": max_tokens} if max_tokens else {}
    full, usage, finish = await stream(http, COMPLETIONS, {"prompt": prompt, **limit})

    so_far, _, _ = await stream(http, COMPLETIONS, {"prompt": prompt, **limit}, cut=k)
    rest_limit = {"max_tokens": max_tokens - k} if max_tokens else {}
    rest, rest_usage, rest_finish = await stream(http, COMPLETIONS, {"prompt": prompt + so_far, **rest_limit})
    assert (so_far + rest).encode() == full.encode()
    assert rest_finish == finish
    assert usage is not None and rest_usage is not None
    assert k + rest_usage["completion_tokens"] == usage["completion_tokens"]
    assert rest_usage["prompt_tokens"] == usage["prompt_tokens"] + k


async def test_a_stream_cut_twice_and_continued_twice_is_still_the_uncut_stream(
    http: httpx.AsyncClient,
) -> None:
    messages = [{"role": "user", "content": chat_content_of_length(20)}]
    full, _, _ = await stream(http, CHAT, {"messages": messages})
    first, _, _ = await stream(http, CHAT, {"messages": messages}, cut=4)
    second, _, _ = await stream(http, CHAT, chat_continuation(messages, first, None), cut=5)
    rest, _, _ = await stream(http, CHAT, chat_continuation(messages, first + second, None))
    assert first + second + rest == full


async def test_a_non_streamed_continuation_of_the_whole_reply_ends_at_once(http: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": chat_content_of_length(3)}]
    full = (await http.post(CHAT, json={"model": MODEL, "messages": messages})).json()
    text = full["choices"][0]["message"]["content"]
    r = await http.post(CHAT, json={"model": MODEL, **chat_continuation(messages, text, None)})
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["message"]["content"] == ""
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 0


@pytest.mark.parametrize(
    ("fields", "last_role", "message"),
    [
        ({"continue_final_message": True, "add_generation_prompt": True}, "assistant", "Cannot set both"),
        ({"continue_final_message": True}, "user", "last message is not from the assistant"),
        ({"continue_final_message": True, "add_generation_prompt": False}, "user", "not from the assistant"),
        ({"continue_final_message": "yes"}, "assistant", "'continue_final_message' must be a boolean"),
        ({"add_generation_prompt": 1}, "assistant", "'add_generation_prompt' must be a boolean"),
    ],
)
async def test_bad_continue_final_message_combinations_are_400(
    http: httpx.AsyncClient, fields: dict[str, Any], last_role: str, message: str
) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": last_role, "content": " the model"}]
    r = await http.post(CHAT, json={"model": MODEL, "messages": messages, **fields})
    assert r.status_code == 400
    assert message in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "fields",
    [{"continue_final_message": True}, {"add_generation_prompt": False}, {"add_generation_prompt": True}, {}],
)
async def test_vllm_accepts_these_combinations_and_so_does_the_simulator(
    http: httpx.AsyncClient, fields: dict[str, Any]
) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " the model"}]
    r = await http.post(CHAT, json={"model": MODEL, "messages": messages, "max_tokens": 2, **fields})
    assert r.status_code == 200


async def test_a_continuation_after_an_abort_reads_the_prompt_and_text_from_the_prefix_cache() -> None:
    messages = [{"role": "user", "content": "Summarise the history of queueing theory. " * 12}]
    long = {"messages": messages, "max_tokens": 3000, "ignore_eos": True}
    with running_simulator(SimSettings(profile="fast")) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            so_far, _, _ = await stream(http, CHAT, long, cut=20)
            before = await wait_for_stats(http, lambda s: s["aborts"] == 1 and s["running"] == 0)
            r = await http.post(CHAT, json={"model": MODEL, **chat_continuation(messages, so_far, 2)})
            prompt_tokens = r.json()["usage"]["prompt_tokens"]
            after = (await http.get("/sim/stats")).json()
            metrics = parse_metrics((await http.get("/metrics")).text)
    original = prompt_tokens - 20
    assert before["prefill_tokens_computed"] == original and before["prefill_tokens_cached"] == 0
    # The aborted request's prompt and its first 20 tokens were cached in whole blocks of 16;
    # the continuation computes only the rest (at least its last token).
    cached = (prompt_tokens - 1) // 16 * 16
    assert after["prefill_tokens_cached"] == cached > original
    assert after["prefill_tokens_computed"] - before["prefill_tokens_computed"] == prompt_tokens - cached
    assert metrics[f'vllm:prefix_cache_hits_total{{model_name="{MODEL}"}}'] == cached
    assert metrics[f'vllm:prefix_cache_queries_total{{model_name="{MODEL}"}}'] == original + prompt_tokens
