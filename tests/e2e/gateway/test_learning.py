"""The gateway teaches its length predictor from real replies and shares it in Redis."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.settings import ConfigError, load_settings
from scheduler.predictor.finetune import FinetuneConfig, FinetunedLengthPredictor
from scheduler.predictor.lexical import PredictorConfig
from scheduler.queue.keys import predictor_key
from tests.scheduler.predictor.test_finetune import essays_and_yes_nos, skip_without_extra
from tests.support import MODEL, eventually


async def test_observed_lengths_reach_the_shared_predictor(
    gateway_factory: Callable[..., str], sim_url: str, redis: Redis, prefix: str
) -> None:
    gw = gateway_factory(
        [{"name": "sim", "url": sim_url, "models": [MODEL]}], predictor_sync_s=0.2
    )
    async with httpx.AsyncClient(base_url=gw, timeout=60) as http:
        for i in range(6):
            # natural lengths (no ignore_eos), far below the cap: each one is learned
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"tell me {i}"}], "max_tokens": 4000}
            assert (await http.post("/v1/chat/completions", json=body)).status_code == 200
    key = predictor_key("default", prefix)

    async def shared() -> bool:
        return int(await redis.hlen(key)) > 0

    await eventually(shared)


async def test_prior_predictor_can_be_chosen(gateway_factory: Callable[..., str], sim_url: str) -> None:
    gw = gateway_factory([{"name": "sim", "url": sim_url, "models": [MODEL]}], predictor="prior")
    async with httpx.AsyncClient(base_url=gw, timeout=60) as http:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        resp = await http.post("/v1/chat/completions", json=body, headers={"x-triage-expected-tokens": "5000"})
    assert resp.status_code == 200
    assert resp.headers["x-triage-class"] == "long"


# The fine-tuned predictor (an extra): configuration errors need no torch.


def test_finetuned_predictor_needs_its_weights_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs predictor_weights"):
        load_settings(None, predictor="finetuned")
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(None, predictor="finetuned", predictor_weights=str(tmp_path / "missing.pt"))


def test_predictor_weights_take_one_file_or_several(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    a.write_bytes(b"x")
    b.write_bytes(b"x")
    one = load_settings(None, predictor="finetuned", predictor_weights=str(a))
    assert one.predictor_weights == [a]
    both = load_settings(None, predictor="finetuned", predictor_weights=[str(a), str(b)])
    assert both.predictor_weights == [a, b]
    monkeypatch.setenv("TRIAGE_PREDICTOR_WEIGHTS", f"{a}, {b}")
    assert load_settings(None, predictor="finetuned").predictor_weights == [a, b]
    monkeypatch.delenv("TRIAGE_PREDICTOR_WEIGHTS")
    with pytest.raises(ConfigError, match="list is empty"):
        load_settings(None, predictor="finetuned", predictor_weights=[])
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(None, predictor="finetuned", predictor_weights=[str(a), str(tmp_path / "c.pt")])


def test_unloadable_weights_are_a_config_error(tmp_path: Path, redis_url: str) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a saved encoder")
    settings = load_settings(None, predictor="finetuned", predictor_weights=str(bad), redis_url=redis_url)
    # without the extra: "needs the 'embed' extra"; with it: "cannot load"
    with pytest.raises(ConfigError, match="embed' extra|cannot load"):
        create_app(settings)


@pytest.mark.timeout(600)  # fine-tunes MiniLM on 32 rows first: seconds alone, minutes on a busy CPU
async def test_finetuned_predictor_places_requests(
    gateway_factory: Callable[..., str], sim_url: str, tmp_path: Path
) -> None:
    skip_without_extra()
    lexical = PredictorConfig(name="fit", prefix="unused")
    config = FinetuneConfig(lexical=lexical, epochs=4, batch_size=8, learning_rate=1e-4, max_pieces=48, threads=2)
    trained = FinetunedLengthPredictor(config)
    trained.fit(essays_and_yes_nos())
    weights = tmp_path / "ft.pt"
    trained.save(weights)

    gw = gateway_factory(
        [{"name": "sim", "url": sim_url, "models": [MODEL]}], predictor="finetuned", predictor_weights=str(weights)
    )
    async with httpx.AsyncClient(base_url=gw, timeout=60) as http:

        async def placed(prompt: str) -> str:
            body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}  # no cap
            resp = await http.post("/v1/chat/completions", json=body)
            assert resp.status_code == 200
            return resp.headers["x-triage-class"]

        # Unseen wording; the lexical half knows nothing yet (the prior, 250 tokens).
        essay = await placed("Compose an in-depth, detailed article on lighthouses, with many examples.")
        yes_no = await placed("Is the word 'lighthouse' a noun? Answer yes or no.")
    assert (essay, yes_no) == ("medium", "short")
