"""Real servers on loopback for tests: an ASGI app served by uvicorn in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator

import uvicorn


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self._ready.set()


@contextlib.contextmanager
def running_app(app: object, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` (lifespan included) on a free port; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    ready = threading.Event()
    server = _Server(config, ready)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        if not ready.wait(timeout=30):
            raise RuntimeError("server did not start within 30 s")
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


async def eventually(condition: Callable[[], Awaitable[bool] | bool], within_s: float = 10.0) -> None:
    """Wait for a condition on state we cannot subscribe to (Redis, another process), bounded."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within_s} s")
        await asyncio.sleep(0.01)
