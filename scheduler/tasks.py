"""Stopping background tasks for certain.

``task.cancel()`` asks once. A library can swallow that request: a loop awaiting a redis-py
8.1 call was seen to stay "cancelling" while it ran on (a stopped replica went on sending
heartbeats, and its ``stop()`` never returned).
``stop`` asks again until every task has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

RECANCEL_S = 0.1  # how long a task may take to end before it is asked again


async def stop(tasks: Iterable[asyncio.Task[object] | None]) -> None:
    """Cancel the tasks and return once every one of them has ended (their errors dropped)."""
    pending = {t for t in tasks if t is not None and not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
