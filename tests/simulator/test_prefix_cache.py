"""The prefix cache: block hashes, sharing, eviction, and what a hit saves.

Most tests drive the scheduler step by step; the last ones read the counters over HTTP.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx

from simulator.blocks import BlockHashes
from simulator.profiles import FAST
from simulator.prompts import chat_prompt, completion_prompt
from simulator.protocol import FinishReason, Prompt
from simulator.scheduler import Scheduler, StepPlan
from simulator.sequence import Sequence
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from simulator.textgen import Vocabulary
from tests.simulator.conftest import MODEL, parse_metrics

VOCAB = Vocabulary()
BLOCK = 4  # small blocks keep the numbers readable


def hashes(prompt: Prompt, first_word: int = 0, block: int = BLOCK) -> BlockHashes:
    words_from = prompt.run_start if prompt.run else first_word
    return BlockHashes(prompt.text, prompt.tokens - prompt.run, VOCAB.words, words_from, block)


def request(text: str, target: int, first_word: int = 0) -> Sequence:
    """A completions request for ``text`` whose reply starts at ``first_word``."""
    prompt = completion_prompt(text, VOCAB)
    return Sequence(
        prompt.tokens,
        target,
        FinishReason.STOP,
        streamed=True,
        arrival=0.0,
        blocks=hashes(prompt, first_word),
    )


def scheduler(**changes: object) -> Scheduler:
    return Scheduler(replace(FAST, block_size=BLOCK, **changes))  # type: ignore[arg-type]


def serve(s: Scheduler, seq: Sequence) -> list[StepPlan]:
    """Run ``seq`` alone to its end; the plans of its steps."""
    s.add(seq)
    plans = []
    while not seq.finished:
        plans.append(s.schedule())
        s.update(plans[-1], now=0.0)
    return plans


def prefilled(plans: list[StepPlan]) -> int:
    return sum(p.prefill_tokens for p in plans)


def test_blocks_are_shared_exactly_as_far_as_the_prefix_is() -> None:
    a = hashes(completion_prompt("x" * 40 + "one ending", VOCAB))
    b = hashes(completion_prompt("x" * 40 + "another ending", VOCAB))
    assert [a[i] for i in range(2)] == [b[i] for i in range(2)]  # 32 characters: two blocks of 4 tokens
    assert a[2] != b[2]


def test_a_continuation_hashes_like_the_original_prompt_and_its_output() -> None:
    original = completion_prompt("y" * 30, VOCAB)
    continued = completion_prompt("y" * 30 + VOCAB.text(7, 9), VOCAB)
    a, b = hashes(original, first_word=7), hashes(continued)
    assert [a[i] for i in range(4)] == [b[i] for i in range(4)]  # 8 prompt tokens, then the words
    other = hashes(original, first_word=8)  # another reply to the same prompt
    assert a[1] == other[1] and a[2] != other[2]


def test_the_role_of_a_message_is_part_of_its_blocks() -> None:
    system = hashes(chat_prompt([{"role": "system", "content": "z" * 64}], False, VOCAB))
    user = hashes(chat_prompt([{"role": "user", "content": "z" * 64}], False, VOCAB))
    assert system[0] != user[0]


def test_a_repeated_prompt_prefills_only_what_is_not_cached() -> None:
    s = scheduler()
    first = serve(s, request("p" * 100, 3))  # 25 tokens: 6 full blocks
    again = serve(s, request("p" * 100, 3))
    assert prefilled(first) == 25
    assert (again[0].queried_tokens, again[0].cached_tokens) == (25, 24)
    assert prefilled(again) == 1  # the last token is always computed, to sample the next one
    assert s.kv_used == 0 and s.kv.cached_tokens == 6 * BLOCK  # of 27 computed: 25 prompt, 2 fed back


def test_without_prefix_caching_nothing_is_cached() -> None:
    s = scheduler(prefix_caching=False)
    serve(s, request("p" * 100, 3))
    again = serve(s, request("p" * 100, 3))
    assert prefilled(again) == 25 and again[0].queried_tokens == 0
    assert s.kv.cached_tokens == 0


def test_an_aborted_sequence_leaves_its_computed_blocks_for_its_continuation() -> None:
    s = scheduler()
    seq = request("q" * 40, 100, first_word=3)  # 10 prompt tokens
    s.add(seq)
    while seq.generated < 12:
        s.update(s.schedule(), now=0.0)
    s.remove(seq)  # the client went away: 10 + 11 tokens computed, 5 full blocks
    assert s.kv_used == 0 and s.kv.cached_tokens == 5 * BLOCK
    cont = request("q" * 40 + VOCAB.text(3, 12), 5)
    plans = serve(s, cont)
    assert plans[0].cached_tokens == 20 and prefilled(plans) == 2  # of 22 prompt tokens


def test_a_block_held_by_two_running_sequences_is_counted_once() -> None:
    s = scheduler()
    a = request("r" * 64, 50)
    s.add(a)
    s.update(s.schedule(), now=0.0)  # a's 16 prompt tokens: 4 blocks, all shared now
    assert s.kv_used == 16
    b = request("r" * 64, 50)
    s.add(b)
    plan = s.schedule()
    assert plan.cached_tokens == 12  # three blocks shared; the last token, so its block, is computed
    assert s.kv_used == 16 + 1 + 4  # a's next token, and b's own copy of the last block


def test_cached_blocks_are_evicted_least_recently_used_first_when_kv_is_needed() -> None:
    s = scheduler(kv_capacity_tokens=40)
    serve(s, request("a" * 32, 1))  # 8 prompt tokens: 2 blocks stay cached
    serve(s, request("b" * 32, 1))
    assert s.kv.cached_tokens == 16
    serve(s, request("a" * 32, 1))  # a is used again: b's blocks are now the least recent
    serve(s, request("c" * 128, 1))  # 32 tokens: 32 + 16 cached > 40, two blocks must go
    assert s.kv.cached_tokens == 40  # c's 8 blocks and a's 2
    assert serve(s, request("a" * 32, 1))[0].cached_tokens == 4  # all but the last block
    assert serve(s, request("b" * 32, 1))[0].cached_tokens == 0


def test_a_preempted_sequence_finds_its_own_blocks_when_readmitted() -> None:
    s = scheduler(kv_capacity_tokens=48)
    a, b = request("s" * 64, 20), request("t" * 64, 20)  # 16 prompt tokens each
    s.add(a)
    s.add(b)
    plans = []
    while not b.finished:
        plans.append(s.schedule())
        s.update(plans[-1], now=0.0)
    assert sum(p.preempted for p in plans) >= 1
    assert sum(p.cached_tokens for p in plans) > 0  # the recompute was partly a cache hit
    assert a.generated == b.generated == 20


async def complete(http: httpx.AsyncClient, prompt: str) -> dict[str, Any]:
    """One short completion of ``prompt``; the ``/sim/stats`` after it."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "ignore_eos": True}
    assert (await http.post("/v1/completions", json=body)).status_code == 200
    return (await http.get("/sim/stats")).json()


async def test_a_second_identical_prompt_computes_fewer_prefill_tokens() -> None:
    prompt = "Describe a priority queue. " * 20  # 540 characters: 135 tokens
    with running_simulator(SimSettings(profile="fast")) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            first = await complete(http, prompt)
            second = await complete(http, prompt)
            metrics = parse_metrics((await http.get("/metrics")).text)
    assert (first["prefill_tokens_computed"], first["prefill_tokens_cached"]) == (135, 0)
    assert second["prefill_tokens_cached"] == 128  # 8 whole blocks of 16, short of the last token
    assert second["prefill_tokens_computed"] - first["prefill_tokens_computed"] == 135 - 128
    assert second["prefix_cache_queries"] == 270
    assert second["prefix_cache_tokens"] == 128  # the same 8 blocks, kept once
    assert metrics[f'vllm:prefix_cache_queries_total{{model_name="{MODEL}"}}'] == 270
    assert metrics[f'vllm:prefix_cache_hits_total{{model_name="{MODEL}"}}'] == 128


async def test_with_prefix_caching_off_every_prompt_is_computed_in_full() -> None:
    prompt = "Describe a priority queue. " * 20
    with running_simulator(SimSettings(profile="fast", prefix_caching=False)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            await complete(http, prompt)
            stats = await complete(http, prompt)
            metrics = parse_metrics((await http.get("/metrics")).text)
    assert (stats["prefill_tokens_computed"], stats["prefill_tokens_cached"]) == (270, 0)
    assert metrics[f'vllm:prefix_cache_queries_total{{model_name="{MODEL}"}}'] == 0


async def test_a_small_kv_cache_evicts_the_least_recently_used_prompt() -> None:
    a, b, c = ("a" * 320, "b" * 320, "c" * 320)  # 80 tokens: 5 blocks each
    with running_simulator(SimSettings(profile="fast", kv_capacity_tokens=160)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            await complete(http, a)
            await complete(http, b)  # a and b fill the 160 slots as cached blocks
            await complete(http, c)  # c needs 80: a's blocks, the oldest, are evicted
            again_b = await complete(http, b)
            again_a = await complete(http, a)
    assert again_b["prefill_tokens_cached"] == 64  # b was still cached: 4 blocks, short of its last token
    assert again_b["prefix_cache_tokens"] == 160
    assert again_a["prefill_tokens_cached"] == 64  # a was not: nothing more was found
