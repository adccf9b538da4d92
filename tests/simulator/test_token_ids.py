"""Token ids: the ids the simulator tells (vLLM's ``return_token_ids``) read back as the prompt
they stand for, so a continuation from ids goes on exactly as the uncut reply — and from the
prefix cache — as a continuation from text does."""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest

from simulator.prompts import chat_prompt as parse_chat
from simulator.protocol import Endpoint, Prompt
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from simulator.textgen import Vocabulary
from simulator.token_ids import FIRST_PROMPT_ID, OUTPUT_BASE, PromptRegistry, prompt_ids, word_id
from tests.simulator.conftest import MODEL, parse_metrics, wait_for_stats
from tests.simulator.test_resume import chat_content_of_length, completion_prompt_of_length

VOCAB = Vocabulary()
WORDS = len(VOCAB)
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def chat_prompt(content: str) -> Prompt:
    return parse_chat([{"role": "user", "content": content}], False, VOCAB)


def ids_of(text: str) -> list[int]:
    """The ids of the simulator's words in ``text``."""
    return [word_id(VOCAB.words.index(w)) for w in re.findall(r" \S+", text)]


def test_a_prompts_ids_are_its_tokens_drawn_from_its_text_below_the_output_ids() -> None:
    prompt = chat_prompt("Tell me about queues, at some length please.")
    ids = prompt_ids(prompt, WORDS)
    assert len(ids) == prompt.tokens
    assert all(FIRST_PROMPT_ID <= i < OUTPUT_BASE for i in ids)
    assert prompt_ids(chat_prompt("Tell me about queues, at some length please."), WORDS) == ids  # the same text
    assert prompt_ids(chat_prompt("Tell me about stacks, at some length please."), WORDS) != ids


def test_a_continuation_read_from_ids_is_the_prompt_they_stand_for_plus_its_run() -> None:
    registry = PromptRegistry()
    prompt = chat_prompt("Tell me about queues.")
    ids = prompt_ids(prompt, WORDS)
    registry.remember(ids, prompt, Endpoint.CHAT)
    run = [word_id((5 + i) % WORDS) for i in range(WORDS + 3)]  # a run may wrap round the cycle
    read = registry.read(ids + run, WORDS)
    assert (read.original, read.table_key, read.text) == (prompt.original, prompt.table_key, prompt.text)
    assert (read.run, read.run_start, read.origin) == (len(run), 5, Endpoint.CHAT)
    assert read.tokens == len(ids) + len(run) and read.ids == tuple(ids + run)
    assert prompt_ids(read, WORDS) == ids + run  # told back as they came


def test_output_ids_that_do_not_follow_one_another_are_not_one_run() -> None:
    registry = PromptRegistry()
    prompt = chat_prompt("Tell me about queues.")
    ids = prompt_ids(prompt, WORDS)
    registry.remember(ids, prompt, Endpoint.CHAT)
    read = registry.read([*ids, word_id(3), word_id(9), word_id(10)], WORDS)
    assert read.run == 2 and read.run_start == 9
    assert read.table_key is None  # the head (the prompt and a stray output id) is no prompt told


def test_ids_never_told_are_a_fresh_prompt_keyed_on_them() -> None:
    read = PromptRegistry().read([7, 8, 9, word_id(1)], WORDS)
    assert (read.original, read.table_key, read.run, read.run_start) == ("7,8,9", None, 1, 1)
    assert read.text.tokens == 3 and read.tokens == 4


def test_the_registry_forgets_the_prompt_least_recently_told_or_read() -> None:
    registry = PromptRegistry(size=2)
    prompts = [chat_prompt(f"Question {i}?") for i in range(3)]
    ids = [prompt_ids(p, WORDS) for p in prompts]
    registry.remember(ids[0], prompts[0], Endpoint.CHAT)
    registry.remember(ids[1], prompts[1], Endpoint.CHAT)
    registry.read(ids[0], WORDS)  # read: the most recent now
    registry.remember(ids[2], prompts[2], Endpoint.CHAT)
    assert len(registry) == 2
    assert registry.read(ids[0], WORDS).table_key == prompts[0].table_key
    assert registry.read(ids[1], WORDS).table_key is None  # forgotten


async def stream_ids(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], cut: int | None = None
) -> tuple[str, list[int], list[int], dict[str, Any] | None]:
    """Stream with token ids asked: the text, the prompt's ids, the output's ids, the last usage."""
    body = {**body, "model": MODEL, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    text, prompt, out, usage = "", [], [], None
    async with http.stream("POST", path, json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = orjson.loads(line[6:])
            usage = chunk.get("usage") or usage
            prompt = chunk.get("prompt_token_ids") or prompt
            for choice in chunk["choices"]:
                prompt = choice.get("prompt_token_ids") or prompt
                text += (choice["delta"].get("content") if path == CHAT else choice["text"]) or ""
                out += choice.get("token_ids") or []  # (a chat role chunk has no such field)
            if cut is not None and len(out) == cut:
                break  # closing the stream aborts the request, as a paused stream's does
    return text, prompt, out, usage


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("k", [1, 7])
async def test_a_stream_cut_and_continued_from_its_token_ids_is_the_uncut_stream(
    http: httpx.AsyncClient, path: str, k: int
) -> None:
    ask = (
        {"messages": [{"role": "user", "content": chat_content_of_length(16)}]}
        if path == CHAT
        else {"prompt": completion_prompt_of_length(16)}
    )
    full, prompt, out, usage = await stream_ids(http, path, ask)
    assert usage is not None and len(out) == usage["completion_tokens"] and len(prompt) == usage["prompt_tokens"]
    assert out == ids_of(full)

    so_far, prompt_again, cut, _ = await stream_ids(http, path, ask, cut=k)
    assert prompt_again == prompt and cut == out[:k]
    rest, continued_prompt, rest_ids, rest_usage = await stream_ids(http, COMPLETIONS, {"prompt": prompt + cut})
    assert continued_prompt == prompt + cut  # vLLM tells a token-id prompt's ids as they came
    assert so_far + rest == full and cut + rest_ids == out
    assert rest_usage is not None and k + rest_usage["completion_tokens"] == usage["completion_tokens"]


async def test_a_continuation_from_ids_reads_the_prompt_and_the_tokens_from_the_prefix_cache() -> None:
    messages = [{"role": "user", "content": "Summarise the history of queueing theory. " * 12}]
    long = {"messages": messages, "max_tokens": 3000, "ignore_eos": True}
    with running_simulator(SimSettings(profile="fast")) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            _, prompt, cut, _ = await stream_ids(http, CHAT, long, cut=20)
            before = await wait_for_stats(http, lambda s: s["aborts"] == 1 and s["running"] == 0)
            r = await http.post(COMPLETIONS, json={"model": MODEL, "prompt": prompt + cut, "max_tokens": 2})
            after = (await http.get("/sim/stats")).json()
            metrics = parse_metrics((await http.get("/metrics")).text)
    assert r.json()["usage"]["prompt_tokens"] == len(prompt) + 20
    cached = (len(prompt) + 20 - 1) // 16 * 16  # whole blocks of 16, the last token computed
    assert before["prefill_tokens_cached"] == 0
    assert after["prefill_tokens_cached"] == cached > len(prompt)
    assert metrics[f'vllm:prefix_cache_hits_total{{model_name="{MODEL}"}}'] == cached


async def test_a_whole_answer_tells_its_ids_when_asked_and_null_when_not(http: httpx.AsyncClient) -> None:
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "Hi there."}], "max_tokens": 3, "ignore_eos": True}
    plain = (await http.post(CHAT, json=ask)).json()
    told = (await http.post(CHAT, json={**ask, "return_token_ids": True})).json()
    assert plain["prompt_token_ids"] is None and plain["choices"][0]["token_ids"] is None
    assert len(told["prompt_token_ids"]) == told["usage"]["prompt_tokens"]
    assert told["choices"][0]["token_ids"] == ids_of(told["choices"][0]["message"]["content"])
