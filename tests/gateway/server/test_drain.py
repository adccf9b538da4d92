"""The drain, in process: ``InFlight`` counts inference requests to their last byte and
refuses new ones while draining; ``Drain.run`` hands queued tickets back, waits for what
runs, and ends what is left with an explicit error (a 503, or an SSE error event)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from gateway.server.drain import CUT_MESSAGE, HAND_BACK_MESSAGE, Drain, InFlight
from scheduler.errors import Draining
from tests.support import eventually


class Exchange:
    """One request through the middleware: the client's side of it."""

    def __init__(self, path: str = "/v1/chat/completions", method: str = "POST") -> None:
        self.scope = {"type": "http", "path": path, "method": method, "headers": []}
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        self.ended = False

    async def receive(self) -> dict[str, Any]:
        await asyncio.Event().wait()  # the client stays, and sends nothing more
        raise AssertionError("unreachable")

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            self.body += message.get("body", b"")
            self.ended = not message.get("more_body", False)


class App:
    """An inference app: answers ``ok`` when released; with ``streams``, sends a first
    event at once. Either way it stops when told the client left (its cleanup)."""

    def __init__(self, streams: bool = False) -> None:
        self.streams = streams
        self.release = asyncio.Event()
        self.client_left = 0

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if self.streams:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        gone = asyncio.ensure_future(receive())
        released = asyncio.ensure_future(self.release.wait())
        await asyncio.wait({gone, released}, return_when=asyncio.FIRST_COMPLETED)
        if gone.done() and gone.result()["type"] == "http.disconnect":
            self.client_left += 1
            released.cancel()
            return
        gone.cancel()
        if not self.streams:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})


def start(middleware: InFlight, exchange: Exchange) -> asyncio.Task[None]:
    return asyncio.ensure_future(middleware(exchange.scope, exchange.receive, exchange.send))


async def test_a_running_request_is_counted_and_finishes_within_the_drain() -> None:
    drain, app = Drain(timeout_s=60), App()
    middleware = InFlight(app, drain)
    exchange = Exchange()
    task = start(middleware, exchange)
    await eventually(lambda: drain.in_flight == 1)

    draining = asyncio.ensure_future(drain.run())
    await eventually(lambda: drain.draining)
    late = Exchange()
    await middleware(late.scope, late.receive, late.send)  # new work is refused meanwhile
    app.release.set()

    assert await draining is True
    await task
    assert exchange.status == 200 and exchange.body == b"ok" and drain.in_flight == 0
    assert late.status == 503 and late.headers["connection"] == "close" and "retry-after" in late.headers
    assert orjson.loads(late.body)["error"]["code"] == "draining"


async def test_probes_and_admin_pages_stay_open_while_draining() -> None:
    drain, app = Drain(timeout_s=60), App()
    app.release.set()
    drain.started = 1.0
    for path, method in (("/ready", "GET"), ("/metrics", "GET"), ("/v1/models", "GET")):
        exchange = Exchange(path, method)
        await InFlight(app, drain)(exchange.scope, exchange.receive, exchange.send)
        assert exchange.status == 200, path
    assert drain.in_flight == 0


async def test_queued_tickets_are_handed_back_with_a_draining_error() -> None:
    errors: list[Exception] = []

    async def hand_back(error: Callable[[], Exception]) -> int:
        errors.append(error())
        return 3

    drain = Drain(timeout_s=60)
    drain.bind(hand_back)
    assert await drain.run() is True  # nothing running
    assert drain.handed_back == 3
    (error,) = errors
    assert isinstance(error, Draining) and str(error) == HAND_BACK_MESSAGE


@pytest.mark.parametrize("streams", [False, True])
async def test_what_still_runs_at_the_timeout_is_ended_with_an_explicit_error(streams: bool) -> None:
    drain, app = Drain(timeout_s=0), App(streams=streams)
    exchange = Exchange()
    task = start(InFlight(app, drain), exchange)
    await eventually(lambda: drain.in_flight == 1 and (exchange.status is not None or not streams))

    assert await drain.run() is False
    await task

    assert app.client_left == 1  # the app was told the client left: its own cleanup ran
    assert exchange.ended and drain.in_flight == 0
    if streams:  # the 200 went out: the stream ends with an SSE error event
        assert exchange.status == 200
        assert exchange.body.startswith(b"data: 1\n\n\n\ndata: ")
        assert orjson.loads(exchange.body.rsplit(b"data: ", 1)[1])["error"]["message"] == CUT_MESSAGE
    else:
        assert exchange.status == 503 and orjson.loads(exchange.body)["error"]["code"] == "draining"


async def test_a_second_signal_ends_the_running_requests_at_once() -> None:
    drain, app = Drain(timeout_s=3600), App(streams=True)
    exchange = Exchange()
    task = start(InFlight(app, drain), exchange)
    await eventually(lambda: drain.in_flight == 1)

    draining = asyncio.ensure_future(drain.run())
    await eventually(lambda: drain.draining)
    drain.hurry()

    assert await draining is False  # not an hour later
    await task
    assert app.client_left == 1 and drain.hurried


async def test_a_receive_the_app_cancels_itself_stays_cancelled_and_a_cut_one_is_a_disconnect() -> None:
    """``guarded_receive`` waits in the caller's own task: a cut cancels that task and turns
    that cancellation, and only that one, into ``http.disconnect``."""
    drain = Drain(timeout_s=0)
    seen: list[object] = []
    waiting = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        own = asyncio.ensure_future(receive())
        await eventually(lambda: any(r.receiving for r in drain._running))  # it waits for the client
        own.cancel()  # the app gives up on a receive of its own
        with pytest.raises(asyncio.CancelledError):
            await own
        seen.append("own cancelled")
        waiting.set()
        seen.append((await receive())["type"])  # then waits again, and the drain cuts it
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    exchange = Exchange()
    task = start(InFlight(app, drain), exchange)
    await waiting.wait()
    assert await drain.run() is False
    await task
    assert seen == ["own cancelled", "http.disconnect"]
    assert exchange.status == 503 and drain.in_flight == 0
