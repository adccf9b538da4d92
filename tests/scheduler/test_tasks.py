"""``tasks.stop`` ends a loop even when a call inside it swallows the cancellation (as a
redis-py call was seen to)."""

from __future__ import annotations

import asyncio

from scheduler import tasks


async def test_a_loop_that_swallows_a_cancellation_is_stopped() -> None:
    swallowed = asyncio.Event()
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            try:
                await asyncio.Event().wait()  # a call that never ends by itself
            except asyncio.CancelledError:
                if not swallowed.is_set():  # the first cancellation is lost, as in the library
                    swallowed.set()
                    continue
                raise

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # let it enter its first call
    await asyncio.wait_for(tasks.stop([task]), 30)  # a single cancel() would never return
    assert swallowed.is_set() and task.cancelled() and rounds == 2


async def test_finished_and_missing_tasks_are_left_as_they_are() -> None:
    done = asyncio.create_task(asyncio.sleep(0, result="kept"))
    await done
    await tasks.stop([done, None])
    assert done.result() == "kept"
