"""The suite's own helpers: what a failing test's report is built from must not fail itself."""

from __future__ import annotations

import asyncio
import gc
import weakref

from tests.support import pending_tasks


class _Thing:
    pass


def test_pending_tasks_reads_past_a_dead_weak_proxy() -> None:
    thing = _Thing()
    proxy = weakref.proxy(thing)
    del thing
    assert any(o is proxy for o in gc.get_objects())  # the object the report's scan meets
    report = pending_tasks()  # raised ReferenceError, hiding the failure it was to describe
    assert "ReferenceError" not in report


async def test_pending_tasks_names_an_unfinished_task() -> None:
    release = asyncio.Event()
    task = asyncio.create_task(release.wait(), name="waits-for-release")
    try:
        assert "waits-for-release" in pending_tasks()
    finally:
        release.set()
        await task
