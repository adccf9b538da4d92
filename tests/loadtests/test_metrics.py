"""Metric math on hand-made timings (docs/loadtests.md#metrics)."""

from __future__ import annotations

import pytest

from loadtests.client import RequestRecord
from loadtests.metrics import Dist, Warmup, percentile, summarize
from loadtests.timeseries import timeseries
from loadtests.workload import Slo


def rec(index: int, start: float, ttft: float | None, e2e: float | None, tokens: int, cls: str = "short",
        ok: bool = True, error: str | None = None, itl: tuple[float, ...] = (), inp: int = 10) -> RequestRecord:
    return RequestRecord(index=index, cls=cls, start_s=start, ok=ok, planned_tokens=tokens, input_tokens=inp,
                         output_tokens=tokens if ok else 0, ttft_s=ttft, e2e_s=e2e, itl_s=itl, error=error)


def test_percentile_interpolates_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_dist_of_values_and_of_nothing() -> None:
    d = Dist.of([3.0, 1.0, 2.0])
    assert (d.count, d.mean, d.p50) == (3, 2.0, 2.0)
    assert Dist.of([]) == Dist()


def test_tpot_is_decode_time_per_token_after_the_first() -> None:
    r = rec(0, 0.0, ttft=0.2, e2e=1.2, tokens=11)
    assert r.tpot_s == pytest.approx(0.1)
    assert rec(0, 0.0, 0.2, 0.2, tokens=1).tpot_s is None  # undefined for one token
    assert rec(0, 0.0, None, 0.5, tokens=0, ok=False, error="http_503").tpot_s is None


def test_summary_per_class_and_overall() -> None:
    records = [
        rec(0, 0.0, 0.1, 1.1, 11, itl=(0.1,) * 10),
        rec(1, 1.0, 0.3, 2.3, 21, itl=(0.1,) * 20),
        rec(2, 2.0, 1.0, 12.0, 101, cls="long", itl=(0.1,) * 100),
        rec(3, 3.0, None, 0.5, 0, ok=False, error="http_503"),
    ]
    slos = {"short": Slo(ttft_s=0.2, tpot_s=0.5), "long": Slo(ttft_s=5.0)}
    s = summarize(records, slos, class_order=["short", "long"])
    assert s.duration_s == pytest.approx(14.0)  # first send 0.0 .. last end 2.0 + 12.0
    assert list(s.classes) == ["short", "long"]
    short = s.classes["short"]
    assert (short.count, short.failed) == (2, 1)
    assert short.errors == {"http_503": 1}
    assert short.ttft_s.mean == pytest.approx(0.2)  # the failure is not averaged in
    assert short.tpot_s.mean == pytest.approx(0.1)
    assert short.itl_s.count == 30  # ITL gaps are pooled
    assert short.goodput_rps == pytest.approx(1 / 14.0)  # only request 0 meets TTFT <= 0.2
    assert short.slo_attainment == pytest.approx(0.5)
    o = s.overall
    assert o.count == 3
    assert o.rps == pytest.approx(3 / 14.0)
    assert o.output_tps == pytest.approx(133 / 14.0)
    assert o.total_tps == pytest.approx((133 + 30) / 14.0)
    assert o.goodput_rps == pytest.approx(2 / 14.0)


def test_cancelled_counts_apart_from_failed() -> None:
    records = [rec(0, 0.0, 0.1, 1.0, 5), rec(1, 0.5, None, 2.0, 0, ok=False, error="cancelled"),
               rec(2, 0.6, None, 0.1, 0, ok=False, error="timeout")]
    g = summarize(records, {}).overall
    assert (g.count, g.failed, g.cancelled) == (1, 1, 1)
    assert g.errors == {"cancelled": 1, "timeout": 1}
    assert g.goodput_rps is None  # no SLO set


def test_warmup_excludes_first_requests_or_first_seconds() -> None:
    records = [rec(i, float(i), 0.1, 0.5, 4) for i in range(10)]
    assert [r.index for r in Warmup(requests=3).measured(records)] == list(range(3, 10))
    assert [r.index for r in Warmup(seconds=4.5).measured(records)] == list(range(5, 10))
    s = summarize(records, {}, Warmup(requests=2))
    assert (s.sent, s.warmup_excluded, s.overall.count) == (10, 2, 8)
    assert s.duration_s == pytest.approx(9.5 - 2.0)


def test_timeseries_in_flight_and_tokens() -> None:
    # one request 0..4 s, tokens from 1 s to 4 s; one from 2 to 2.5 s with all tokens at its end
    records = [rec(0, 0.0, 1.0, 4.0, 300), rec(1, 2.0, 0.5, 0.5, 50)]
    ts = timeseries(records, bin_s=1.0)
    assert ts.t_s == [0.0, 1.0, 2.0, 3.0]
    assert ts.in_flight == [1.0, 1.0, 1.5, 1.0]
    assert ts.output_tps == [0.0, 100.0, 150.0, 100.0]
    assert sum(ts.rps) == 2
