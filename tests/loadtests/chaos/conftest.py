"""A replica per test (``serving.serving_replica``) in front of a simulator of this
folder's own, so the simulator's running count is these tests' alone, on the session's
embedded Valkey."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadtests.chaos.checks import Target
from loadtests.chaos.stack import MODEL
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.loadtests.chaos.serving import serving_replica


@pytest.fixture(scope="session")
def chaos_sim() -> Iterator[str]:
    with running_simulator(SimSettings(profile="fast", model=MODEL, max_num_seqs=64)) as url:
        yield url


@pytest.fixture
def replica(redis_url: str, chaos_sim: str) -> Iterator[Target]:
    with serving_replica(redis_url, chaos_sim) as target:
        yield target
