"""Predictors by name: what each builds, what replicas share, and that the default never
imports the fine-tuned predictor's code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.predictor.factory import PREDICTORS, PredictorSpec, PredictorUnavailable, build
from scheduler.predictor.lexical import LengthPredictor
from scheduler.predictor.prior import PriorPredictor


def test_the_prior_learns_nothing_and_shares_nothing() -> None:
    built = build(PredictorSpec("prior", prior_tokens=300))
    assert isinstance(built.predictor, PriorPredictor) and built.shared is None


@pytest.mark.parametrize("name", ["learned", "finetuned"])  # finetuned without weights: the lexical model
def test_the_lexical_model_is_shared(name: str) -> None:
    built = build(PredictorSpec(name, shared_name="n1", prefix="p1"))
    assert isinstance(built.predictor, LengthPredictor) and built.shared is built.predictor
    assert built.shared.config.name == "n1" and built.shared.config.prefix == "p1"


def test_weights_that_do_not_load_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PredictorUnavailable, match="finetuned|predictor_weights"):
        build(PredictorSpec("finetuned", weights=[tmp_path / "missing.pt"]))


def test_every_configurable_name_has_a_factory() -> None:
    from typing import get_args

    from gateway.settings import Settings

    assert set(get_args(Settings.model_fields["predictor"].annotation)) == set(PREDICTORS)


def test_a_gateway_on_the_default_imports_no_network_code() -> None:
    probe = (
        "import sys; from gateway.app import make_predictor; from gateway.settings import Settings; "
        "make_predictor(Settings()); "
        "print(sorted(m for m in sys.modules if m.startswith(('torch', 'transformers', 'sentence_transformers', "
        "'scheduler.predictor.finetune', 'scheduler.predictor.network', 'scheduler.predictor.embed'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
