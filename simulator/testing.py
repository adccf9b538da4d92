"""Real servers on loopback for tests in any package: an ASGI app served by uvicorn in
a background thread with its own event loop, so synchronous tests and tests on another
event loop can both use it. The socket is bound and listening before the thread
starts, so the URL is usable as soon as the context is entered.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace

import uvicorn
from uvicorn._types import ASGIApplication

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
def serving(config_for: Callable[[int], uvicorn.Config], host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve the uvicorn config that ``config_for(bound_port)`` returns; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    bound_port = sock.getsockname()[1]
    ready = threading.Event()
    server = _Server(config_for(bound_port), ready)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="test-server", daemon=True)
    thread.start()
    try:
        if not ready.wait(timeout=30):
            raise RuntimeError("server did not start within 30 s")
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)  # a loaded machine may take a while to shut a server down
        sock.close()


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
