"""Prompt and output length rules (pure functions)."""

from __future__ import annotations

import statistics

import pytest

from simulator.lengths import estimate_prompt_tokens, natural_length, plan_output, prompt_hash
from simulator.protocol import FinishReason


@pytest.mark.parametrize(("chars", "tokens"), [(0, 1), (1, 1), (4, 1), (5, 2), (400, 100), (401, 101)])
def test_prompt_tokens_are_a_quarter_of_the_characters_at_least_one(chars: int, tokens: int) -> None:
    assert estimate_prompt_tokens(chars) == tokens


def test_natural_length_is_a_function_of_prompt_and_seed() -> None:
    a = natural_length(prompt_hash("hello", 0), 200, 0.9, 10_000)
    assert a == natural_length(prompt_hash("hello", 0), 200, 0.9, 10_000)
    lengths_seed0 = [natural_length(prompt_hash(f"p{i}", 0), 200, 0.9, 10_000) for i in range(50)]
    lengths_seed1 = [natural_length(prompt_hash(f"p{i}", 1), 200, 0.9, 10_000) for i in range(50)]
    assert lengths_seed0 != lengths_seed1


def test_natural_lengths_spread_around_the_median() -> None:
    lengths = [natural_length(prompt_hash(f"prompt {i}", 0), 200, 0.9, 100_000) for i in range(2000)]
    assert 150 <= statistics.median(lengths) <= 260
    assert min(lengths) < 100 < 400 < max(lengths)


def test_natural_length_respects_the_limit() -> None:
    assert all(1 <= natural_length(prompt_hash(str(i), 0), 5000, 2.0, 300) <= 300 for i in range(200))


@pytest.mark.parametrize(
    ("natural", "max_tokens", "min_tokens", "ignore_eos", "room", "tokens", "reason"),
    [
        (50, None, 0, False, 1000, 50, FinishReason.STOP),  # ends by itself
        (50, 20, 0, False, 1000, 20, FinishReason.LENGTH),  # cut by max_tokens
        (50, 50, 0, False, 1000, 50, FinishReason.STOP),  # EOS exactly at the cap
        (50, 80, 0, True, 1000, 80, FinishReason.LENGTH),  # ignore_eos: exactly the cap
        (50, None, 0, True, 300, 300, FinishReason.LENGTH),  # ignore_eos, no cap: the context window
        (10, 100, 30, False, 1000, 30, FinishReason.STOP),  # min_tokens lifts the natural length
        (10, 20, 20, False, 1000, 20, FinishReason.STOP),  # min_tokens equal to the cap
        (500, None, 0, False, 120, 120, FinishReason.LENGTH),  # the context window cuts
    ],
)
def test_plan_output(
    natural: int,
    max_tokens: int | None,
    min_tokens: int,
    ignore_eos: bool,
    room: int,
    tokens: int,
    reason: FinishReason,
) -> None:
    plan = plan_output(natural, max_tokens, min_tokens, ignore_eos, room)
    assert (plan.tokens, plan.finish_reason) == (tokens, reason)
