"""The test servers' own instrument: a served event loop that stops running is reported,
with where its thread is, so a test that then times out says what held the server."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from simulator.testing import serving


class _Told(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []
        self.stalled = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if "ran nothing" in self.messages[-1]:
            self.stalled.set()


def test_a_served_loop_that_blocks_is_reported_with_its_stack() -> None:
    told = _Told()
    logger = logging.getLogger("triage.testing")
    logger.addHandler(told)

    async def blocks_its_loop(request: Request) -> PlainTextResponse:
        told.stalled.wait(timeout=120)  # a blocking call on the loop, until the watchdog has told
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/block", blocks_its_loop)])

    def config(port: int) -> uvicorn.Config:
        return uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")

    try:
        with serving(config, stall_s=0.2) as url:
            assert httpx.get(f"{url}/block", timeout=180).text == "ok"
    finally:
        logger.removeHandler(told)
    assert told.stalled.is_set()
    stalled = next(m for m in told.messages if "ran nothing" in m)
    assert "in blocks_its_loop" in stalled  # the blocked thread's own frame


def test_a_served_app_that_does_not_stop_fails_with_its_stack() -> None:
    release = threading.Event()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        release.wait(timeout=120)  # its shutdown blocks its loop until the test has seen the failure

    def config(port: int) -> uvicorn.Config:
        return uvicorn.Config(Starlette(lifespan=lifespan), host="127.0.0.1", port=port, log_level="warning",
                              lifespan="on")

    before = set(threading.enumerate())  # other tests' servers (the session's simulator) run on
    stuck: list[threading.Thread] = []
    try:
        with pytest.raises(RuntimeError, match="did not stop within 0.2 s") as failed:
            with serving(config, stop_s=0.2) as url:
                assert httpx.get(f"{url}/nothing").status_code == 404
        assert "in lifespan" in str(failed.value)  # the stuck thread's own frame
        stuck = [t for t in threading.enumerate() if t.name == "test-server" and t not in before]
        assert len(stuck) == 1  # still running when its test was told
    finally:
        release.set()
    stuck[0].join(timeout=30)
    assert not stuck[0].is_alive()
