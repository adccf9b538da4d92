"""The KV-cache ledger on its own: slots held per sequence, full blocks shared and kept
after their last holder ends, evicted least recently freed first (a prefix outlives its
tail)."""

from __future__ import annotations

from simulator.blocks import BlockHashes
from simulator.kvcache import NO_HIT, CacheHit, KvCache
from simulator.prompts import completion_prompt
from simulator.protocol import FinishReason
from simulator.sequence import Sequence
from simulator.textgen import Vocabulary

VOCAB = Vocabulary()
BLOCK = 4


def seq(text: str, caching: bool = True) -> Sequence:
    prompt = completion_prompt(text, VOCAB)
    blocks = BlockHashes(prompt.text, prompt.tokens, VOCAB.words, 0, BLOCK) if caching else None
    return Sequence(prompt.tokens, 5, FinishReason.STOP, streamed=False, arrival=0.0, blocks=blocks)


def prefill(kv: KvCache, s: Sequence) -> None:
    """What the scheduler does for a prompt it computes whole: slots, then its blocks."""
    hit = kv.lookup(s)
    kv.take(s, hit)
    kv.allocate(s, s.prompt_tokens - s.computed)
    s.computed = s.prompt_tokens
    kv.register(s)


def test_without_caching_it_counts_slots() -> None:
    kv = KvCache(capacity=100, block_size=BLOCK, caching=False)
    s = seq("a" * 40, caching=False)  # 10 tokens
    assert kv.lookup(s) == NO_HIT
    prefill(kv, s)
    assert (kv.used, kv.room, kv.cached_tokens) == (10, 90, 0)
    kv.release(s)
    assert (kv.used, kv.cached_tokens) == (0, 0)


def test_a_finished_prompts_full_blocks_are_found_again() -> None:
    kv = KvCache(capacity=100, block_size=BLOCK, caching=True)
    first = seq("a" * 40)
    prefill(kv, first)
    assert kv.used == 10 and first.kv_held == 2  # two full blocks shared, a private tail of two
    kv.release(first)
    assert kv.used == 0 and kv.cached_tokens == 8  # kept for reuse, counted against nothing

    again = seq("a" * 40)
    hit = kv.lookup(again)
    assert hit == CacheHit(tokens=8, reclaimed=8)
    kv.take(again, hit)
    assert again.computed == 8 and kv.used == 8 and kv.cached_tokens == 0


def test_a_block_held_by_two_is_counted_once_and_kept_until_both_end() -> None:
    kv = KvCache(capacity=100, block_size=BLOCK, caching=True)
    a, b = seq("b" * 32), seq("b" * 32)  # 8 tokens: the lookup shares one block (the last token is computed)
    prefill(kv, a)
    prefill(kv, b)
    assert kv.lookup(seq("b" * 32)) == CacheHit(tokens=4, reclaimed=0)  # held, not reclaimed
    assert kv.used == 8 + 4  # a's 8, and b's own 4 beyond the shared block
    kv.release(a)
    assert kv.cached_tokens == 4  # a's second block; the first is still b's too
    assert kv.used == 4 + 4  # b's share of the first block, and its own copy of the second
    kv.release(b)
    assert kv.used == 0 and kv.cached_tokens == 8


def test_eviction_takes_the_tail_before_the_prefix() -> None:
    kv = KvCache(capacity=16, block_size=BLOCK, caching=True)
    old = seq("c" * 52)  # 13 tokens: three full blocks
    prefill(kv, old)
    kv.release(old)
    assert kv.cached_tokens == 12

    other = seq("d" * 36, caching=False)
    kv.allocate(other, 8)  # 8 used + 12 cached > 16: one cached block must go
    assert kv.cached_tokens == 8
    assert kv.lookup(seq("c" * 52)).tokens == 8  # the first two blocks are still there: the tail went
