"""The fine-tuned predictor's settings, without torch: what reaches its word-piece window."""

from __future__ import annotations

import pytest

from scheduler.predictor.finetune_config import FinetuneConfig, clip


def test_a_prompt_that_fits_is_kept_whole() -> None:
    config = FinetuneConfig(max_pieces=4, tail_pieces=2)  # 32 + 16 characters reach the window
    text = "x" * 48
    assert clip(text, config) is text


def test_a_long_prompt_keeps_its_head_and_its_tail() -> None:
    config = FinetuneConfig(max_pieces=4, tail_pieces=2)
    text = "H" * 32 + "m" * 1000 + "T" * 16  # the ask is often last: the tail is kept too
    assert clip(text, config) == "H" * 32 + " " + "T" * 16


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_both_precisions_are_accepted(precision: str) -> None:
    assert FinetuneConfig(precision=precision).precision == precision
