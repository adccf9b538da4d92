"""Failure injection, for testing how a gateway copes with a misbehaving backend.

All faults are off by default. They are set at start-up (settings / CLI) and can be
replaced at run time with ``POST /sim/faults``; a POST replaces the whole set, so ``{}``
switches every fault off again.

- ``down``: ``/health``, ``/v1/models`` and every generation request answer 503.
- ``fail_rate``: that fraction of generation requests is answered with ``status_code``
  (503 unless set) and an OpenAI error body, before the engine sees them.
- ``retry_after``: adds a ``Retry-After`` header (seconds) to those answers.
- ``drop_after_tokens``: after that many output tokens the connection is closed without
  finishing the response (a truncated chunked body), as if the server process died.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields
from typing import Any


class InjectedDrop(Exception):
    """Raised inside the ASGI app to make the server close a started response abruptly."""


@dataclass(frozen=True, slots=True)
class FaultSettings:
    """The injected faults in force. The default injects none."""

    fail_rate: float = 0.0  # fraction of generation requests refused before any byte
    status_code: int = 503  # HTTP status of those refusals (429 and 503 are the useful ones)
    retry_after: float | None = None  # seconds, sent as Retry-After on refusals
    drop_after_tokens: int | None = None  # close the connection after this many output tokens
    down: bool = False  # health fails and every generation request gets 503

    def __post_init__(self) -> None:
        if not 0.0 <= self.fail_rate <= 1.0:
            raise ValueError("fail_rate must be between 0 and 1")
        if not 400 <= self.status_code <= 599:
            raise ValueError("status_code must be a 4xx or 5xx status")
        if self.drop_after_tokens is not None and self.drop_after_tokens < 0:
            raise ValueError("drop_after_tokens must be >= 0")
        if self.retry_after is not None and self.retry_after < 0:
            raise ValueError("retry_after must be >= 0")

    @classmethod
    def from_json(cls, data: Any) -> FaultSettings:
        """Build from a decoded JSON object; unknown keys and wrong types raise ``ValueError``."""
        if not isinstance(data, dict):
            raise ValueError("faults must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown fault fields: {', '.join(sorted(unknown))}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ValueError(str(exc)) from None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Refusal:
    """An injected error answer."""

    status_code: int
    message: str
    retry_after: float | None


class FaultInjector:
    """Holds the current faults and decides, per request, whether to inject one."""

    def __init__(self, faults: FaultSettings, seed: int) -> None:
        self.faults = faults
        # Seeded, so a fault test with fail_rate 0.5 refuses the same requests every run.
        self._rng = random.Random(seed)

    def refusal(self) -> Refusal | None:
        """The error to answer a new generation request with, or ``None`` to serve it."""
        f = self.faults
        if f.down:
            return Refusal(503, "The server is down (injected fault).", f.retry_after)
        if f.fail_rate > 0.0 and self._rng.random() < f.fail_rate:
            return Refusal(f.status_code, "Injected failure.", f.retry_after)
        return None
