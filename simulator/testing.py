"""``running_simulator``: a real simulator server on loopback, for tests in any package.

The server runs in a background thread with its own event loop, so synchronous tests
and tests on another event loop can both use it. The socket is bound and listening
before the thread starts, so the URL is usable as soon as the context is entered.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace

import uvicorn

from simulator.server import quiet_injected_drops, uvicorn_config
from simulator.settings import SimSettings


class _Server(uvicorn.Server):
    """Signals start-up through a thread event instead of being polled."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self._ready.set()


@contextlib.contextmanager
def running_simulator(settings: SimSettings | None = None, *, port: int = 0) -> Iterator[str]:
    """Serve ``settings`` on ``settings.host`` and yield the base URL (``http://host:port``).

    ``port=0`` (the default) picks a free port; ``settings.port`` is ignored.
    """
    settings = settings or SimSettings(profile="fast")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, port))
    sock.listen(1024)
    bound_port = sock.getsockname()[1]
    quiet_injected_drops()
    ready = threading.Event()
    server = _Server(uvicorn_config(replace(settings, port=bound_port)), ready)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="simulator", daemon=True)
    thread.start()
    try:
        if not ready.wait(timeout=30):
            raise RuntimeError("simulator did not start within 30 s")
        yield f"http://{settings.host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
