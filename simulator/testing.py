"""Real servers on loopback for tests in any package: an ASGI app served by uvicorn in
a background thread with its own event loop, so synchronous tests and tests on another
event loop can both use it. The socket is bound and listening before the thread
starts, so the URL is usable as soon as the context is entered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace

import uvicorn
from uvicorn._types import ASGIApplication

from simulator.server import quiet_injected_drops, uvicorn_config
from simulator.settings import SimSettings

log = logging.getLogger("triage.testing")

STALL_S = 5.0  # a served loop that ran nothing this long is reported, with its thread's stack
STOP_S = 30.0  # a served app still running this long after it was told to stop fails its test


class _Server(uvicorn.Server):
    """Signals start-up through a thread event instead of being polled."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self._ready = ready
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread_id = 0

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.loop, self.thread_id = asyncio.get_running_loop(), threading.get_ident()
        self._ready.set()


def _stack(thread_id: int) -> str:
    """Where a thread is now (its innermost 25 frames)."""
    frame = sys._current_frames().get(thread_id)
    return "".join(traceback.format_stack(frame, limit=25)) if frame is not None else "(thread gone)\n"


def _watch(server: _Server, stop: threading.Event, stall_s: float) -> None:
    """Report a served event loop that stops running callbacks (a blocking call on it, or
    its thread starved): a test that then times out says where the server's thread was."""
    loop = server.loop
    assert loop is not None
    while not stop.wait(1.0):
        ran = threading.Event()
        try:
            loop.call_soon_threadsafe(ran.set)
        except RuntimeError:  # the loop has closed
            return
        if ran.wait(stall_s) or stop.is_set():
            continue
        log.warning("a served event loop ran nothing for %.1f s; its thread is at:\n%s", stall_s,
                    _stack(server.thread_id))
        waited = stall_s
        while not ran.wait(1.0) and not stop.is_set():
            waited += 1.0
        log.warning("the served event loop ran again after about %.0f s", waited)


@contextlib.contextmanager
def serving(
    config_for: Callable[[int], uvicorn.Config], host: str = "127.0.0.1", port: int = 0, stall_s: float = STALL_S,
    stop_s: float = STOP_S,
) -> Iterator[str]:
    """Serve the uvicorn config that ``config_for(bound_port)`` returns; yield its base URL.
    A loop that runs nothing for ``stall_s`` is logged (``triage.testing``) with its stack; a
    server still running ``stop_s`` after it was told to stop raises, with its stack (a
    thread left serving would go on polling and closing descriptors beside later tests)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    bound_port = sock.getsockname()[1]
    ready = threading.Event()
    server = _Server(config_for(bound_port), ready)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="test-server", daemon=True)
    thread.start()
    stop = threading.Event()
    watch: threading.Thread | None = None
    try:
        if not ready.wait(timeout=30):
            raise RuntimeError("server did not start within 30 s")
        watch = threading.Thread(target=_watch, args=(server, stop, stall_s), name="test-server-watch", daemon=True)
        watch.start()
        yield f"http://{host}:{bound_port}"
    finally:
        stop.set()
        server.should_exit = True
        thread.join(timeout=stop_s)  # a loaded machine may take a while to shut a server down
        if watch is not None:
            watch.join(timeout=5)
        if thread.is_alive():
            # the socket stays open: its loop closes the descriptor when it stops at last, and
            # closed here first, the number could by then name another socket of this process
            raise RuntimeError(f"a served app did not stop within {stop_s:g} s; its thread is at:\n"
                               f"{_stack(thread.ident or 0)}")
        sock.close()  # the server's own close has detached it, unless it never started


def running_app(app: ASGIApplication, host: str = "127.0.0.1") -> contextlib.AbstractContextManager[str]:
    """Serve any ASGI ``app`` (lifespan included) on a free port; yield its base URL."""

    def config(port: int) -> uvicorn.Config:
        return uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=2
        )

    return serving(config, host)


def running_simulator(settings: SimSettings | None = None, *, port: int = 0) -> contextlib.AbstractContextManager[str]:
    """Serve a simulator on ``settings.host`` and yield the base URL (``http://host:port``).

    ``port=0`` (the default) picks a free port; ``settings.port`` is ignored.
    """
    resolved = settings or SimSettings(profile="fast")
    quiet_injected_drops()
    return serving(lambda bound: uvicorn_config(replace(resolved, port=bound)), resolved.host, port)
