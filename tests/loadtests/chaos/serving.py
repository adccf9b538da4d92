"""A chaos target in-process: a gateway built from ``replica_config`` (the config the
chaos stack writes for ``triage serve``), served on loopback.

The deadlines are shorter than the stack's, so slow clients are cut off within a second."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from gateway.settings import Settings
from loadtests.chaos.checks import Target
from loadtests.chaos.stack import KEY, MODEL, replica_config
from tests.support import serving_gateway

DEADLINE_S = 0.5  # head and body deadlines of the served gateway


@contextlib.contextmanager
def serving_replica(redis_url: str, sim_url: str, slots: int = 2, **overrides: Any) -> Iterator[Target]:
    """One replica as the chaos stack configures it (a key prefix of its own); its ``Target``."""
    prefix = f"chaos{uuid.uuid4().hex[:8]}"
    config = {**replica_config(redis_url, prefix, sim_url, slots, 0),
              "header_timeout_s": DEADLINE_S, "body_timeout_s": DEADLINE_S, **overrides}
    with serving_gateway(Settings.model_validate(config)) as url:
        parts = urlsplit(url)
        assert parts.hostname and parts.port
        yield Target(parts.hostname, parts.port, redis_url, prefix, sim_url, KEY, MODEL)
