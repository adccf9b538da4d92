"""Which predictor runs in a gateway: a name -> factory table.

The default (``learned``) needs nothing but this package; ``finetuned`` imports its
module (and torch, when its weights load) only when it is chosen, so a gateway on the
default never loads the neural network's code. Every predictor that learns online
shares a lexical ``LengthPredictor`` between replicas through Redis: ``Built.shared``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.predictor.prior import PriorPredictor
from scheduler.predictor.warm_start import BUILTIN
from scheduler.types import Predictor


class PredictorUnavailable(Exception):
    """The chosen predictor cannot be built (its extra is not installed, its weights do not load)."""


@dataclass(frozen=True, slots=True)
class PredictorSpec:
    """What the configuration says about the predictor."""

    name: str = "learned"  # a key of PREDICTORS
    shared_name: str = "default"  # the Redis name of the shared online model
    prefix: str = "triage"
    prior_tokens: float = 250.0
    weights: Sequence[Path] | None = None  # saved encoders, for "finetuned"
    warm_start: Path | None = BUILTIN  # the lexical model's day-one state (None: the prior alone)


@dataclass(frozen=True, slots=True)
class Built:
    predictor: Predictor
    shared: LengthPredictor | None  # the part replicas share through Redis (none for the prior)


def warm_start_file(setting: str) -> Path | None:
    """The file a ``predictor_warm_start`` setting names: ``builtin``, ``none`` or a path."""
    if setting == "builtin":
        return BUILTIN
    return None if setting == "none" else Path(setting)


def _config(spec: PredictorSpec) -> PredictorConfig:
    return PredictorConfig(
        name=spec.shared_name, prefix=spec.prefix, prior_tokens=spec.prior_tokens, warm_start=spec.warm_start
    )


def _prior(spec: PredictorSpec) -> Built:
    return Built(PriorPredictor(spec.prior_tokens), None)


def _learned(spec: PredictorSpec) -> Built:
    lexical = LengthPredictor(_config(spec))
    return Built(lexical, lexical)


def _finetuned(spec: PredictorSpec) -> Built:
    if spec.weights is None:  # nothing fine-tuned to load: the lexical model serves
        return _learned(spec)
    from scheduler.predictor.embed import EmbeddingUnavailable
    from scheduler.predictor.finetune import FinetuneConfig, FinetunedLengthPredictor

    finetuned = FinetunedLengthPredictor(FinetuneConfig(lexical=_config(spec)))
    try:
        finetuned.load(*spec.weights)
    except EmbeddingUnavailable as exc:
        raise PredictorUnavailable(f"predictor 'finetuned': {exc}") from None
    except Exception as exc:  # a file that is not a saved encoder: say which and why
        files = " ".join(map(str, spec.weights))
        raise PredictorUnavailable(f"predictor_weights {files}: cannot load ({exc})") from None
    return Built(finetuned, finetuned.lexical)


PREDICTORS: dict[str, Callable[[PredictorSpec], Built]] = {
    "prior": _prior,
    "learned": _learned,
    "finetuned": _finetuned,
}


def build(spec: PredictorSpec) -> Built:
    """The predictor the spec names; ``PredictorUnavailable`` if it cannot be built."""
    return PREDICTORS[spec.name](spec)
