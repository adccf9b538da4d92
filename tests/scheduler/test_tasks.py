"""``tasks.stop`` ends a loop even when a call inside it swallows the cancellation (as a
redis-py call was seen to); ``tasks.Periodic`` runs a step on a timer, through failures,
until stopped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import RedisError

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


def counting(runs: int) -> tuple[list[int], asyncio.Event, Callable[[], Awaitable[None]]]:
    """A step that counts its calls and sets the event at call ``runs``."""
    calls: list[int] = []
    reached = asyncio.Event()

    async def step() -> None:
        calls.append(len(calls) + 1)
        if len(calls) == runs:
            reached.set()

    return calls, reached, step


async def test_periodic_runs_its_step_again_and_again_until_stopped() -> None:
    calls, reached, step = counting(3)
    periodic = tasks.Periodic(0.001, step, "counting")
    periodic.start()
    await asyncio.wait_for(reached.wait(), 30)
    await periodic.stop()
    assert not periodic.running
    ended = len(calls)
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(calls) == ended >= 3


async def test_the_first_step_waits_for_the_period_unless_at_once() -> None:
    calls, reached, step = counting(1)
    later = tasks.Periodic(None, step, "later")  # None: a period that never ends by itself
    later.start()
    for _ in range(5):
        await asyncio.sleep(0)
    assert calls == []
    later.wake()
    await asyncio.wait_for(reached.wait(), 30)
    await later.stop()

    calls, reached, step = counting(1)
    now = tasks.Periodic(None, step, "now", at_once=True)
    now.start()
    await asyncio.wait_for(reached.wait(), 30)  # not woken: it ran at start
    await now.stop()


async def test_a_wake_during_a_step_runs_another_right_after_it() -> None:
    calls, reached, step = counting(2)

    async def waking_step() -> None:
        if not calls:
            periodic.wake()
        await step()

    periodic = tasks.Periodic(None, waking_step, "waking", at_once=True)
    periodic.start()
    await asyncio.wait_for(reached.wait(), 30)
    await periodic.stop()


async def test_a_failing_step_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    errors: list[Exception] = [RedisError("connection lost"), ValueError("a bug")]
    reached = asyncio.Event()

    async def step() -> None:
        if errors:
            raise errors.pop(0)
        reached.set()

    periodic = tasks.Periodic(0.001, step, "flaky")
    with caplog.at_level(logging.WARNING, logger="triage.tasks"):
        periodic.start()
        await asyncio.wait_for(reached.wait(), 30)
        assert periodic.running
        await periodic.stop()
    failures = [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert failures == [
        (logging.WARNING, "flaky failed: connection lost", False),
        (logging.ERROR, "flaky failed", True),  # unexpected: with its traceback
    ]


async def test_stop_ends_a_periodic_whose_step_swallows_a_cancellation() -> None:
    inside = asyncio.Event()
    swallowed = asyncio.Event()

    async def step() -> None:
        while True:
            inside.set()
            try:
                await asyncio.Event().wait()  # a call that never ends by itself
            except asyncio.CancelledError:
                if not swallowed.is_set():  # the first cancellation is lost, as in the library
                    swallowed.set()
                    continue
                raise

    periodic = tasks.Periodic(None, step, "stuck", at_once=True)
    periodic.start()
    await asyncio.wait_for(inside.wait(), 30)
    await asyncio.wait_for(periodic.stop(), 30)  # a single cancel() would never return
    assert swallowed.is_set() and not periodic.running
    await periodic.stop()  # stopping again is harmless
