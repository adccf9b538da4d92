"""The scheduler's shared vocabulary: small frozen values passed between modules.

Nothing here does I/O. Every other module of ``scheduler`` and ``gateway`` speaks
in these types, so a reader can learn the model of the system from this file.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class LengthClass(enum.StrEnum):
    """Expected output length bucket, derived from a :class:`Prediction`."""

    SHORT = "short"
    MEDIUM = "medium"
    LONG = "long"


class PredictionSource(enum.StrEnum):
    """Where a prediction came from, most trusted first."""

    HINT = "hint"  # the client said how long (x-triage-expected-tokens)
    ORACLE = "oracle"  # the true length, from a load generator (benchmarks only)
    LEARNED = "learned"  # the online model, trained on observed lengths
    PRIOR = "prior"  # cold start: nothing learned yet
    CAP = "cap"  # max_tokens was below any guess, so the cap is the prediction


@dataclass(frozen=True, slots=True)
class Prediction:
    """Expected output tokens of one request."""

    tokens: float  # point estimate (median-like) of output tokens
    upper: float  # an upper quantile (about p90) of output tokens
    source: PredictionSource


@dataclass(frozen=True, slots=True)
class PredictInput:
    """What the predictor may look at. Built once per request by the gateway."""

    model: str
    tenant: str
    prompt: str  # the user-visible text: last user message (chat) or the prompt (completions)
    system: str = ""  # the system prompt / template, if any ("" for completions)
    prompt_chars: int = 0  # total characters of every message or prompt
    n_messages: int = 1
    max_tokens: int | None = None  # the client's cap, if it sent one
    hint: int | None = None  # x-triage-expected-tokens, if sent


@dataclass(frozen=True, slots=True)
class ClassThresholds:
    """Upper bounds (in predicted output tokens) of the short and medium classes."""

    short_max: int = 256
    medium_max: int = 1024

    def classify(self, tokens: float) -> LengthClass:
        if tokens <= self.short_max:
            return LengthClass.SHORT
        if tokens <= self.medium_max:
            return LengthClass.MEDIUM
        return LengthClass.LONG
