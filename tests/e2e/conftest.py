"""End-to-end fixtures: real gateway servers on loopback, in front of real simulators."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from gateway.app import create_app
from gateway.settings import Settings
from tests.support import MODEL, running_app


@pytest.fixture
def gateway_factory(redis_url: str, prefix: str) -> Iterator[Callable[..., str]]:
    """Start a gateway on a free port; every gateway of one test shares its Redis prefix."""
    with ExitStack() as stack:

        def start(backends: list[dict[str, Any]], **overrides: Any) -> str:
            values: dict[str, Any] = {"redis_url": redis_url, "key_prefix": prefix, "backends": backends}
            values.update(overrides)
            settings = Settings.model_validate(values)
            return stack.enter_context(running_app(create_app(settings)))

        yield start


@pytest.fixture
def gateway(gateway_factory: Callable[..., str], sim_url: str) -> str:
    return gateway_factory([{"name": "sim", "url": sim_url, "models": [MODEL], "max_concurrency": 16}])
