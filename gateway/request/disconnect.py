"""Noticing that the client left: one watcher task per request, not one per await.

The watcher reads ASGI ``receive`` (the body has been read by then, so the next
message is ``http.disconnect``) and, when the client leaves, cancels whatever task
is inside ``guard()`` — the request's own task, waiting for the backend or relaying
it. ``guard()`` turns that cancellation, and only that one, into ``ClientGone``; a
cancellation from elsewhere (server shutdown) passes through unchanged.

One watcher serves a request from its admission to its last byte: the proxy starts it,
and a streamed response takes it over (``RelayResponse``) and stops it at the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.types import Receive


class ClientGone(Exception):
    """The client closed its connection; nobody is left to answer."""


class DisconnectWatch:
    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._task: asyncio.Task[None] | None = None
        self._target: asyncio.Task[object] | None = None  # the task inside guard(), if any
        self._cancelled: asyncio.Task[object] | None = None  # the task this watch cancelled
        self._stopped = False
        self.gone = False

    @property
    def task(self) -> asyncio.Task[None]:
        """The watcher: done when the client has left (started on first use)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())
        return self._task

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                break
        if self._stopped:
            return  # the response had ended (uvicorn reports its end as a disconnect too)
        self.gone = True
        target, self._target = self._target, None
        if target is not None:
            self._cancelled = target
            target.cancel()

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Run the block in the current task; raise ``ClientGone`` if the client leaves."""
        if self.gone:
            raise ClientGone()
        current = asyncio.current_task()
        assert current is not None
        self.task  # noqa: B018 - starts the watcher
        self._target = current
        try:
            yield
        except asyncio.CancelledError:
            if self._cancelled is current:
                self._cancelled = None
                current.uncancel()
                raise ClientGone() from None
            raise
        finally:
            self._target = None

    def stop(self) -> None:
        """Once the response has ended or been handed on; safe to call twice."""
        self._stopped = True
        self._target = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
