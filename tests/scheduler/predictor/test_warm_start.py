"""The shipped warm start: loaded by default, never pushed to Redis, still learning."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.app import make_predictor
from gateway.settings import Settings
from scheduler.predictor import warm_start
from scheduler.predictor.factory import PredictorSpec, build
from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.queue.keys import predictor_key
from scheduler.types import ClassThresholds, LengthClass, PredictInput, PredictionSource

ESSAY = "Write a detailed 2000-word essay on the history of the Roman Empire, with sources."
HELLO = "Translate 'good morning' into French."


def ask(prompt: str) -> PredictInput:
    return PredictInput(model="m", tenant="t", prompt=prompt, prompt_chars=len(prompt))


def test_the_builtin_file_ships_in_the_package_and_carries_only_linear_sums() -> None:
    values = warm_start.load(warm_start.BUILTIN)
    assert values["n"] >= PredictorConfig().min_observations
    assert all(warm_start.keep(field) for field in values)
    assert any(field.startswith("w:") for field in values) and any(field.startswith("h:") for field in values)


def test_a_fresh_default_predictor_ranks_prompts_on_day_one() -> None:
    cold = LengthPredictor(PredictorConfig())
    warm = build(PredictorSpec()).predictor
    assert cold.predict(ask(ESSAY)) == cold.predict(ask(HELLO))  # the prior, for every prompt
    essay, hello = warm.predict(ask(ESSAY)), warm.predict(ask(HELLO))
    assert essay.source is hello.source is PredictionSource.LEARNED
    assert essay.tokens > hello.tokens
    thresholds = ClassThresholds()
    assert thresholds.classify(essay.tokens) is not LengthClass.SHORT
    assert thresholds.classify(hello.tokens) is LengthClass.SHORT


def test_the_setting_selects_builtin_none_or_a_file(tmp_path: Path) -> None:
    assert make_predictor(Settings()).predictor.predict(ask(ESSAY)).source is PredictionSource.LEARNED
    off = make_predictor(Settings(predictor_warm_start="none")).predictor
    assert off.predict(ask(ESSAY)) == off.predict(ask(HELLO))
    own = tmp_path / "warm.json"
    own.write_text('{"n": 60, "s:ignored": 5.0}')  # a template correction is never loaded
    assert warm_start.load(own) == {"n": 60.0}
    assert make_predictor(Settings(predictor_warm_start=str(own))).predictor.predict(
        ask(ESSAY)
    ).source is PredictionSource.LEARNED
    with pytest.raises(ValueError, match="predictor_warm_start"):
        Settings(predictor_warm_start=str(tmp_path / "missing.json"))


def test_dump_then_load_round_trips_the_kept_fields(tmp_path: Path) -> None:
    path = tmp_path / "w.json.gz"
    kept = warm_start.dump({"w:1": 0.123456, "g:1": 2.0, "c:x": 3.0, "n": 7.0, "w:2": 0.0}, path)
    assert kept == 3 and warm_start.load(path) == {"w:1": 0.1235, "g:1": 2.0, "n": 7.0}
    assert warm_start.prune({"w:1": 1.0, "g:1": 0.01, "w:2": 1.0, "g:2": 1.0, "h:3": 2.0}, 0.05) == {
        "w:2": 1.0, "g:2": 1.0, "h:3": 2.0,
    }


async def test_the_warm_start_is_never_pushed_and_learning_goes_on(redis: Redis, prefix: str) -> None:
    config = PredictorConfig(name="ws", prefix=prefix, warm_start=warm_start.BUILTIN)
    a, b = LengthPredictor(config), LengthPredictor(config)
    before = a.predict(ask(HELLO)).tokens
    for _ in range(30):
        a.observe(ask(HELLO), 900)
    await a.push(redis)
    stored = {k.decode(): float(v) for k, v in (await redis.hgetall(predictor_key("ws", prefix))).items()}
    assert stored["n"] == 30.0  # what was learned online, not the shipped count
    await b.pull(redis)
    assert b.observations == warm_start.load(warm_start.BUILTIN)["n"] + 30.0
    assert b.predict(ask(HELLO)).tokens > before  # the other replica sees the lesson too
    await redis.delete(predictor_key("ws", prefix))
