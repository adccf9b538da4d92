"""The reliability suite's quick form: two replicas run as ``triage serve`` runs them,
keys configured, one simulated backend (``loadtests.chaos.stack``); the long form is
``triage bench chaos`` (docs/benchmarks/reliability.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.chaos.checks import Target
from loadtests.chaos.stack import chaos_stack
from loadtests.stack import Child


@pytest.fixture(scope="module")
def chaos(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Target], list[Child]]]:
    workdir: Path = tmp_path_factory.mktemp("chaos")
    with chaos_stack(workdir, replicas=2, slots=4, redis_url=redis_url) as running:
        yield running
