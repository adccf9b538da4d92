"""The soak: its open-loop load served through a replica, samples of a live process from
/proc, and the growth summary read from the samples."""

from __future__ import annotations

import dataclasses
import os

from loadtests.chaos.checks import Target
from loadtests.chaos.soak import Sample, SoakResult, sample, soak


def test_a_process_is_sampled_from_proc() -> None:
    rss_mb, fds = sample(os.getpid())
    assert rss_mb > 0
    assert fds >= 3  # stdin, stdout, stderr at least


def test_growth_is_measured_from_the_first_sample_after_the_warm_up() -> None:
    samples = [Sample(0.0, 50.0, 10), Sample(1.0, 80.0, 12), Sample(2.0, 100.0, 20), Sample(5.0, 130.0, 22),
               Sample(10.0, 120.0, 21)]
    result = SoakResult(duration_s=10.0, rate=1.0, samples={7: samples})
    assert result.growth() == {7: {"rss_start_mb": 100.0, "rss_end_mb": 120.0, "growth_mb": 20.0,
                                   "peak_mb": 130.0, "fds_start": 20, "fds_end": 21}}
    assert result.growth(warmup_share=0.0)[7]["rss_start_mb"] == 50.0


async def test_a_short_soak_is_served_and_samples_the_given_process(replica: Target) -> None:
    pid = os.getpid()  # the replica runs in this process
    result = await soak([replica, replica], [pid], duration_s=1.0, rate=6, seed=2, sample_every_s=0.2)
    assert result.failed == {}
    assert result.sent == 6 and result.ok == 6
    assert result.sent_s >= 5 / 6  # the last request is due 5/6 s after the start
    assert len(result.samples[pid]) >= 2  # at the start, and once more when it stops
    assert all(s.rss_mb > 0 and s.fds > 0 for s in result.samples[pid])
    assert set(result.growth()) == {pid}


async def test_refused_requests_are_counted_by_status(replica: Target) -> None:
    wrong = dataclasses.replace(replica, key="sk-wrong")
    result = await soak([wrong], [], duration_s=0.5, rate=4, sample_every_s=0.2)
    assert result.sent == 2 and result.ok == 0
    assert result.failed == {"401": 2}
