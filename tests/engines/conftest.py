"""A real vLLM (CPU build) serving a tiny random-weight Llama, with real gateways in front.

One server for the whole folder: its start-up (a minute or more on a busy 2-core
machine) is paid once. It runs priority scheduling with a small batch and a bounded
queue, so every test here can reach the state it needs: 4 requests running, at most 6
in the engine (running + waiting) before vLLM answers 503. Skipped, with the reason,
where no vLLM Python is installed (``.ci/run`` installs one into ``.venv-vllm``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.settings import Settings
from loadtests.engines.vllm import (
    EngineUnavailable,
    VllmServer,
    VllmSpec,
    build_model,
    find_python,
    running_vllm,
    vllm_version,
)
from tests.support import running_app

# pytest-timeout counts fixture set-up against the first test that needs it: here that is
# building the model and starting vLLM (one to three minutes on a busy 2-core machine, and
# itself bounded by the launcher's start timeout), on top of the test's own calls.
ENGINE_TEST_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S))


MAX_NUM_SEQS = 4
MAX_IN_ENGINE = 6  # --max-num-queued-reqs: running + waiting
MAX_MODEL_LEN = 16384  # the tiny model's own context
# a gateway that pauses its one slot's stream for the first short request: the mechanism
# under test, whatever the pause rule's budget (max_slack_s: however slowly a busy machine
# brought the long stream to its first tokens, the starvation bound counts from its arrival)
PAUSING = dict(preempt=True, quantum_tokens=4, max_pauses=1, heartbeat_s=0.05, max_slack_s=3600, pause_budget=1.0,
               pause_window_s=3600)
ONE_SLOT = {"max_concurrency": 1, "adaptive": False, "resume": "vllm"}
# a request that holds its slot until cancelled: none ends within a test (with 8,000, one on a
# starved CI core ended before the test saw the batch full); 4 of them fit the KV cache
FILL_TOKENS = 16000


@pytest.fixture(scope="session")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    try:
        python = find_python()
        vllm_version(python)
    except EngineUnavailable as exc:
        pytest.skip(f"no vLLM to test against: {exc}")
    model = build_model(python, tmp_path_factory.mktemp("tiny-llama"), seed=0)
    spec = VllmSpec(
        model_dir=model, max_num_seqs=MAX_NUM_SEQS, max_num_queued_reqs=MAX_IN_ENGINE,
        scheduling_policy="priority", cpus="0", max_model_len=MAX_MODEL_LEN,  # the other core: the gateways, Valkey, the test
    )  # fmt: skip
    with running_vllm(spec, python) as server:
        yield server


@pytest.fixture
async def engine_redis(embedded_redis_url: str) -> AsyncIterator[Redis]:
    """A client of the gateways' Redis: the embedded Valkey, always. These tests are about the
    engine; the queue scripts are tested against REDIS_URL's server elsewhere, and a shared
    server slowed by other users would delay grants past the engine states waited for here."""
    client = Redis.from_url(embedded_redis_url)
    yield client
    await client.aclose()


def gateways_in_front(
    stack: ExitStack, backend: dict[str, Any], redis_url: str, prefix: str
) -> Callable[..., str]:
    """``start(backend overrides, settings overrides)``: a gateway in front of one engine
    (``backend``: its name, url, models, max_concurrency), stopped with ``stack``."""

    def start(overrides_b: dict[str, Any] | None = None, **overrides: Any) -> str:
        b = dict(backend) | (overrides_b or {})
        values: dict[str, Any] = {"redis_url": redis_url, "key_prefix": prefix, "backends": [b],
                                  "probe_interval_s": 0.2}
        values.update(overrides)
        return stack.enter_context(running_app(create_app(Settings.model_validate(values))))

    return start


@pytest.fixture
def engine_gateway(vllm: VllmServer, embedded_redis_url: str, prefix: str) -> Iterator[Callable[..., str]]:
    """Start a gateway in front of the vLLM server: ``start(backend overrides, settings overrides)``."""
    with ExitStack() as stack:
        backend = {"name": "vllm", "url": vllm.url, "models": [vllm.model], "max_concurrency": MAX_NUM_SEQS}
        yield gateways_in_front(stack, backend, embedded_redis_url, prefix)
