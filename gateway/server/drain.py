"""Graceful drain: what a replica does between SIGTERM and its exit.

    SIGTERM ─► /ready 503 at once, new inference answered 503 + Retry-After
            ─► tickets still queued here handed back (withdrawn; their clients get 503)
            ─► running requests finish, for at most ``drain_timeout_s``; those left
               are ended with an explicit error (their leases released)
            ─► it stops listening; a connection it had accepted but that sent no request
               yet is still answered (503 ``draining``), for at most ``ACCEPTED_GRACE_S``
            ─► uvicorn's shutdown; leases still held are released; exit

The last-but-one step matters with ``--workers``: a worker with nothing running finishes
its drain at once while a sibling still streams on the same socket, and a connection the
kernel handed it just then would otherwise be closed without an answer.

The server keeps listening all the while: a readiness probe or a load balancer sees a
503, not a refused connection, and takes the replica out of rotation. A second signal
ends the running requests at once (with the same explicit errors) and exits; a third
is uvicorn's own shutdown.

``Drain`` is the state (``create_app`` makes one per app, the routes read it);
``InFlight`` is the ASGI middleware that counts inference requests until their last
byte and refuses new ones while draining; ``draining_server`` wraps uvicorn's server
class so the first signal drains instead of stopping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType
from typing import Any, cast

from gateway import sse
from gateway.errors import draining
from scheduler.errors import Draining

log = logging.getLogger("triage.drain")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

INFERENCE_PREFIX = "/v1/"  # the work a drain waits for and refuses; probes and admin pages stay open
HAND_BACK_MESSAGE = "This gateway replica is shutting down and handed the queued request back; retry it."
CUT_MESSAGE = "This gateway replica shut down before the response was complete (drain_timeout_s)."
CUT_GRACE_S = 5.0  # for requests ended at the drain's timeout to clean up
ACCEPTED_GRACE_S = 5.0  # for a connection accepted before the listener closed to send its request
ACCEPTED_POLL_S = 0.05


class _Running:
    """One inference request in flight, as the middleware sees it."""

    __slots__ = ("started", "finished", "cut", "receiving", "ended_by_cut")

    def __init__(self) -> None:
        self.started = False  # the response's head went out
        self.finished = False  # its last byte went out
        self.cut = False  # the drain ran out of time: end it now
        self.receiving: set[asyncio.Task[Any]] = set()  # tasks waiting for the client's next message
        self.ended_by_cut: set[asyncio.Task[Any]] = set()  # of those, the ones ``end`` cancelled

    def end(self) -> None:
        """Cut it: a task waiting for the client's next message is told the client left."""
        self.cut = True
        for task in self.receiving:
            self.ended_by_cut.add(task)
            task.cancel()


class Drain:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.started: float | None = None  # monotonic time of the signal
        self.handed_back = 0
        self._running: set[_Running] = set()  # inference requests between their first and last byte
        self._hand_back: Callable[[Callable[[], Exception]], Awaitable[int]] | None = None
        self._idle: asyncio.Event | None = None
        self._hurry: asyncio.Event | None = None
        self.hurried = False  # a second signal: end what runs now

    @property
    def draining(self) -> bool:
        return self.started is not None

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def bind(self, hand_back: Callable[[Callable[[], Exception]], Awaitable[int]]) -> None:
        """What hands this replica's queued tickets back (``Dispatcher.hand_back``)."""
        self._hand_back = hand_back

    def enter(self, running: _Running) -> None:
        self._running.add(running)

    def leave(self, running: _Running) -> None:
        self._running.discard(running)
        if not self._running and self._idle is not None:
            self._idle.set()

    async def run(self) -> bool:
        """Drain this replica; True if every running request finished within the timeout
        (those left are then ended with an explicit error)."""
        if self.started is None:
            self.started = time.monotonic()
        log.info("draining: refusing new work, %d request(s) running", self.in_flight)
        if self._hand_back is not None:
            self.handed_back = await self._hand_back(lambda: Draining(HAND_BACK_MESSAGE))
            if self.handed_back:
                log.info("draining: handed %d queued request(s) back", self.handed_back)
        self._idle = asyncio.Event()
        self._hurry = asyncio.Event()
        if self.hurried:
            self._hurry.set()
        if await self._wait_idle(self.timeout_s, self._hurry):
            return True
        if self.hurried:
            log.warning("draining: stopped by a second signal; %d running request(s) are ended", self.in_flight)
        else:
            log.warning("draining: %d request(s) still running after %.0f s; they are ended", self.in_flight,
                        self.timeout_s)
        for running in list(self._running):
            running.end()
        await self._wait_idle(CUT_GRACE_S)  # their cleanup: upstream closed, lease released
        return False

    def hurry(self) -> None:
        """Stop waiting for running requests (a second signal): end them now."""
        self.hurried = True
        if self._hurry is not None:
            self._hurry.set()

    async def _wait_idle(self, timeout_s: float, hurry: asyncio.Event | None = None) -> bool:
        assert self._idle is not None
        if not self._running:
            return True
        waits = {asyncio.ensure_future(self._idle.wait())}
        if hurry is not None:
            waits.add(asyncio.ensure_future(hurry.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return not self._running


class InFlight:
    """ASGI middleware: counts inference requests until their response's last byte (a
    stream included); while draining, answers new ones 503 with ``Retry-After``.

    A request still running when the drain runs out of time is ended here: the app is
    told the client left (its own cleanup closes the upstream call and releases the
    lease), and the client gets an explicit error instead — a 503 if nothing was sent
    yet, else an SSE error event that ends the stream."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(INFERENCE_PREFIX) or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            await _refuse(scope, receive, send)
            return
        running = _Running()

        async def guarded_send(message: dict[str, Any]) -> None:
            if running.cut:
                return  # the middleware answers from here on
            if message["type"] == "http.response.start":
                running.started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                running.finished = True
            await send(message)

        async def guarded_receive() -> dict[str, Any]:
            # No task of its own and no race: a cut cancels the waiting task, and the
            # cancellation it made (that one only) becomes the client leaving.
            if running.cut:
                return {"type": "http.disconnect"}
            task = asyncio.current_task()
            assert task is not None
            running.receiving.add(task)
            try:
                return await receive()
            except asyncio.CancelledError:
                if task in running.ended_by_cut:
                    running.ended_by_cut.discard(task)
                    if task.uncancel() == 0:  # nobody else cancelled it meanwhile
                        return {"type": "http.disconnect"}
                raise
            finally:
                running.receiving.discard(task)

        self.drain.enter(running)
        try:
            await self.app(scope, guarded_receive, guarded_send)
        finally:
            self.drain.leave(running)
        if running.cut and not running.finished:
            await _end(running, scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send) -> None:
    response = draining().response()
    response.headers["connection"] = "close"  # the client's next try opens a connection elsewhere
    await response(scope, receive, send)


async def _end(running: _Running, scope: Scope, receive: Receive, send: Send) -> None:
    if not running.started:
        await _refuse(scope, receive, send)
        return
    # a blank line first: the last block relayed may have ended inside an event
    error = sse.error(CUT_MESSAGE, "service_unavailable", "draining")
    await send({"type": "http.response.body", "body": b"\n\n" + error, "more_body": False})


def draining_server(
    base: type, config: Any, drain: Drain | Callable[[], Drain | None], ignore_sigint: bool = False
) -> Any:
    """An instance of ``base`` (a ``uvicorn.Server`` subclass) whose first SIGTERM or
    SIGINT drains and then stops it; a second one ends the running requests now.
    ``drain``: the app's, or how to find it once the server has built its app (a worker's
    factory runs inside ``serve``). ``ignore_sigint``: a worker's, whose supervisor turns
    a Ctrl-C into SIGTERM (``gateway/server/workers.py``)."""
    find: Callable[[], Drain | None] = (lambda: drain) if isinstance(drain, Drain) else drain

    class DrainingServer(base):  # type: ignore[misc, valid-type]
        _loop: asyncio.AbstractEventLoop | None = None
        _draining: asyncio.Task[None] | None = None  # held: a task nobody references may be collected

        async def serve(self, sockets: Any = None) -> None:
            self._loop = asyncio.get_running_loop()
            await super().serve(sockets)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if ignore_sigint and sig == signal.SIGINT and not self.should_exit:
                return
            drain = find()
            if self._loop is None or self.should_exit or drain is None or drain.hurried:
                super().handle_exit(sig, frame)  # not serving yet, or a third signal: as uvicorn does
                return
            # (this runs in a signal handler: what logs or awaits goes to the loop)
            if drain.draining:  # a second signal: end the running requests now, then exit
                self._loop.call_soon_threadsafe(self._hurry, sig)
                return
            drain.started = time.monotonic()  # /ready flips now, before the loop runs again
            self._loop.call_soon_threadsafe(self._start, sig)

        def _hurry(self, sig: int) -> None:
            log.info("%s: ending the running requests now", signal.Signals(sig).name)
            cast(Drain, find()).hurry()

        def _start(self, sig: int) -> None:
            log.info("%s: draining (a second signal ends the running requests now)", signal.Signals(sig).name)
            self._draining = asyncio.get_running_loop().create_task(self._drain_then_exit(sig))

        async def _drain_then_exit(self, sig: int) -> None:
            await cast(Drain, find()).run()
            await self._answer_the_accepted()
            # what is left after the drain: idle keep-alive connections, or cut streams
            self.config.timeout_graceful_shutdown = 5
            super().handle_exit(sig, None)

        async def _answer_the_accepted(self) -> None:
            """Stop accepting; then give each connection that sent no request yet the time to
            send it (it is answered 503 ``draining``), instead of closing it unanswered."""
            for server in getattr(self, "servers", []):
                server.close()  # uvicorn closes them again at shutdown: harmless

            def silent() -> int:
                return sum(1 for c in self.server_state.connections if getattr(c, "cycle", True) is None)

            if not silent():
                return
            log.info("draining: stopped listening; waiting for %d accepted connection(s) to send their request",
                     silent())
            for _ in range(int(ACCEPTED_GRACE_S / ACCEPTED_POLL_S)):  # uvicorn tells no event for a request's head
                await asyncio.sleep(ACCEPTED_POLL_S)
                if not silent():
                    break

    return DrainingServer(config)


def quiet_stop_server() -> type:
    import uvicorn

    class QuietStopServer(uvicorn.Server):
        """Stops gracefully on SIGINT / SIGTERM and then simply returns.

        uvicorn re-raises the signal after its graceful shutdown; under uvloop that
        KeyboardInterrupt lands in the finished lifespan task and prints a traceback on
        every Ctrl-C (uvicorn issue #1579). The shutdown is already done, so it is dropped;
        the embedded servers are stopped afterwards by ``gateway/serve.py``.
        """

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return QuietStopServer
