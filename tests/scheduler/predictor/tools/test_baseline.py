"""The benchmark's baseline: ridge regression on TF-IDF word 1-2 grams, in pure Python."""

from __future__ import annotations

import math

import pytest

from scheduler.predictor.tools.baseline import TfidfRidge

TEXTS = ["write a long essay on rome", "write a long essay on greece", "say hi", "say hello", "write an essay"]
TOKENS = [2000, 1800, 5, 6, 1500]


def test_it_learns_which_words_mean_long_replies() -> None:
    model = TfidfRidge(alpha=0.1).fit(TEXTS, TOKENS)
    assert model.predict_log("a long essay on carthage") > math.log(500)
    assert model.predict_log("say hi again") < math.log(50)


def test_text_with_no_known_term_gets_the_mean() -> None:
    model = TfidfRidge().fit(TEXTS, TOKENS)
    mean = sum(math.log(t) for t in TOKENS) / len(TOKENS)
    assert model.predict_log("zzz qqq") == pytest.approx(mean)
    assert model.predict_log("") == pytest.approx(mean)


def test_a_stronger_penalty_shrinks_towards_the_mean() -> None:
    mean = sum(math.log(t) for t in TOKENS) / len(TOKENS)
    loose, tight = TfidfRidge(alpha=0.1).fit(TEXTS, TOKENS), TfidfRidge(alpha=100.0).fit(TEXTS, TOKENS)
    assert abs(tight.predict_log("say hi") - mean) < abs(loose.predict_log("say hi") - mean)


def test_it_fits_the_training_rows_closely_with_little_penalty() -> None:
    model = TfidfRidge(alpha=1e-3, max_iter=500).fit(TEXTS, TOKENS)
    for text, tokens in zip(TEXTS, TOKENS, strict=True):
        assert model.predict_log(text) == pytest.approx(math.log(tokens), abs=0.3)
