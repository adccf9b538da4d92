"""One JSON line per request (opt-in: ``request_log``), on the ``triage.requests`` logger.

What an operator needs to answer "what happened to this tenant's requests": who
(tenant, key id — never the key), what (model, class, tier, predicted and actual
tokens), how long (queue wait, TTFT, duration) and how it ended (outcome, status).
Never prompt or completion text. ``triage serve`` writes the logger to stdout; an
embedding application attaches its own handler.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

import orjson

LOGGER = "triage.requests"


@dataclass(frozen=True, slots=True)
class RequestLine:
    request_id: str
    tenant: str
    key_id: str
    model: str
    cls: str
    tier: str
    backend: str
    predicted_tokens: int | None
    input_tokens: int | None
    output_tokens: int | None
    queue_wait_s: float | None
    ttft_s: float | None
    duration_s: float
    pauses: int
    outcome: str
    status: int


class RequestLog:
    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or logging.getLogger(LOGGER)

    def write(self, line: RequestLine) -> None:
        record = asdict(line)
        record["class"] = record.pop("cls")
        for name in ("queue_wait_s", "ttft_s", "duration_s"):
            if record[name] is not None:
                record[name] = round(record[name], 6)
        self._log.info(orjson.dumps({"time": round(time.time(), 3), "event": "request", **record}).decode())


def to_stdout() -> None:
    """``triage serve`` with ``request_log: true``: the lines go to stdout, bare."""
    logger = logging.getLogger(LOGGER)
    if any(getattr(h, "_triage_stdout", False) for h in logger.handlers):
        return
    import sys

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler._triage_stdout = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
