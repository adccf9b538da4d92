"""Background loops: ``Periodic`` runs a step on a timer; ``stop`` ends tasks for certain.

``task.cancel()`` asks once. A library can swallow that request: a loop awaiting a redis-py
8.1 call was seen to stay "cancelling" while it ran on (a stopped replica went on sending
heartbeats, and its ``stop()`` never returned).
``stop`` asks again until every task has ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from redis.exceptions import RedisError

RECANCEL_S = 0.1  # how long a task may take to end before it is asked again

_log = logging.getLogger("triage.tasks")


async def stop(tasks: Iterable[asyncio.Task[object] | None]) -> None:
    """Cancel the tasks and return once every one of them has ended (their errors dropped)."""
    pending = {t for t in tasks if t is not None and not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)


class Periodic:
    """``await step()`` every ``every_s`` seconds, in the background, from ``start`` to ``stop``.

    The first step runs one period after ``start`` (``at_once``: at once). ``every_s``
    None: only when woken. ``wake`` runs the next step now; a wake during a step runs
    another right after it. A step that raises is logged under ``name`` (a ``RedisError``
    as a warning, anything else with its traceback) and the loop goes on; the period is
    counted from the end of a step, so steps never overlap."""

    def __init__(
        self, every_s: float | None, step: Callable[[], Awaitable[object]], name: str, *,
        at_once: bool = False, log: logging.Logger | None = None,
    ) -> None:
        self.every_s = every_s
        self.name = name
        self._step = step
        self._at_once = at_once
        self._log = log or _log
        self._woken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    def wake(self) -> None:
        """Run the step now rather than at the end of the period."""
        self._woken.set()

    async def stop(self) -> None:
        """Return once the loop has ended (a step under way is cancelled)."""
        task, self._task = self._task, None
        await stop([task])

    async def _run(self) -> None:
        if not self._at_once:
            await self._wait()
        while True:
            try:
                await self._step()
            except RedisError as exc:
                self._log.warning("%s failed: %s", self.name, exc)
            except Exception:
                self._log.exception("%s failed", self.name)
            await self._wait()

    async def _wait(self) -> None:
        try:
            async with asyncio.timeout(self.every_s):
                await self._woken.wait()
        except TimeoutError:
            pass
        self._woken.clear()
