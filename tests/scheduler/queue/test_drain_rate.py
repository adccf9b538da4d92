"""How fast a pool's queue drains: the EWMA of the grant counter, and the dispatcher's
heartbeat that feeds it from a real Redis-protocol server."""

from __future__ import annotations

import pytest

from scheduler.queue.drain_rate import DrainRate
from scheduler.types import CallResult
from tests.scheduler.stack import POOL, ask, backend, request, running_stack


def test_the_first_sample_is_the_rate_then_it_moves_by_an_ewma() -> None:
    d = DrainRate()
    d.observe(10.0, 100)
    assert d.rate == 0.0  # one sample: no rate yet
    d.observe(12.0, 120)
    assert d.rate == pytest.approx(10.0)
    d.observe(13.0, 120)  # nothing granted for a second
    assert d.rate == pytest.approx(0.7 * 10.0)


@pytest.mark.parametrize(
    ("case", "now", "granted"),
    [("the same instant", 12.0, 150), ("time going back", 11.0, 150), ("the counter going back (Redis restarted)", 13.0, 5)],
)
def test_a_sample_that_cannot_be_a_rate_is_skipped(case: str, now: float, granted: int) -> None:
    d = DrainRate()
    d.observe(10.0, 100)
    d.observe(12.0, 120)
    d.observe(now, granted)
    assert d.rate == pytest.approx(10.0), case


def test_after_a_skipped_sample_the_next_counts_from_it() -> None:
    d = DrainRate()
    d.observe(0.0, 50)
    d.observe(1.0, 0)  # a Redis restart reset the counter
    d.observe(2.0, 4)
    assert d.rate == pytest.approx(4.0)


async def test_the_dispatcher_measures_its_pools_grants(any_redis_url: str, prefix: str) -> None:
    async with running_stack(any_redis_url, prefix, [backend("a", max_concurrency=8)]) as s:
        await s.dispatcher.heartbeat(POOL)
        await s.dispatcher.heartbeat(POOL)  # two samples, no grants between them
        assert s.dispatcher.drain_rate(POOL) == 0.0
        for _ in range(3):
            job = await s.scheduler.admit(ask(), request())
            await (await job.start())
            job.finish(CallResult(True, tokens=1), None)
        await s.dispatcher.heartbeat(POOL)
        assert s.dispatcher.drain_rate(POOL) > 0
        job = await s.scheduler.admit(ask(), request())
        assert job.drain_rate() == s.dispatcher.drain_rate(POOL)  # what its Retry-After is made of
