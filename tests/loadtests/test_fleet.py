"""``bench fleet``: how inversions are counted, what Redis cost is taken per request, and a
small run of the whole command (real Valkey, simulators, gateways)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.fleet import FleetConfig, pool_of
from loadtests.fleet_watch import Inversions, server_delta
from triage.cli import main


@pytest.mark.parametrize(
    ("before", "after", "inverted", "pairs"),
    [
        ({b"a": 1, b"b": 2}, {b"b": 2}, 0, 0),  # the best left first: in order
        ({b"a": 1, b"b": 2}, {b"a": 1}, 1, 1),  # b granted while a (better) stayed
        ({b"a": 1, b"b": 2, b"c": 3}, {b"a": 1, b"b": 2}, 1, 2),  # c jumped two
        ({b"a": 1, b"b": 2}, {b"a": 1, b"b": 2, b"x": 0.5}, 0, 0),  # a newcomer is no inversion
        ({b"a": 1, b"b": 2}, {}, 0, 0),  # both granted between two reads
        ({b"a": 2}, {b"x": 1}, 0, 0),  # a left; x arrived later with a better score
    ],
)
def test_an_inversion_is_a_grant_past_a_better_ticket_that_stayed(before, after, inverted, pairs) -> None:
    inv = Inversions()
    inv.observe(before, after)
    assert (inv.inverted, inv.overtaken_pairs) == (inverted, pairs)
    assert inv.grants_seen == len(before.keys() - after.keys())


def test_redis_cost_leaves_out_the_watchers_reads() -> None:
    before = {"cpu_s": 1.0, "commands": {"evalsha": (10, 1000), "zrange": (5, 500), "hgetall": (30, 300)}}
    after = {"cpu_s": 1.5, "commands": {"evalsha": (30, 5000), "zrange": (105, 100_500), "hgetall": (90, 900),
                                        "info": (2, 10)}}
    cost = server_delta(before, after, requests=10, wall_s=5.0)
    assert cost["redis_calls"] == {"evalsha": 20, "hgetall": 60}
    assert cost["redis_commands_per_request"] == 8.0
    assert cost["redis_scripts_per_request"] == 2.0
    # 0.5 s of CPU, 0.10001 s of it the watcher's zrange and our info
    assert cost["redis_cpu_ms_per_request"] == pytest.approx((0.5 - 0.10001) * 100, abs=1e-3)


def test_backends_split_into_contiguous_even_pools() -> None:
    cfg = FleetConfig(backends=64, pools=4)
    sizes = [sum(pool_of(i, cfg) == p for i in range(64)) for p in range(4)]
    assert sizes == [16, 16, 16, 16]
    assert [pool_of(i, FleetConfig(backends=5, pools=2)) for i in range(5)] == [0, 0, 0, 1, 1]


def test_a_small_fleet_run(tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    code = main(["bench", "fleet", "--replicas", "2", "--backends", "2", "--pools", "2", "--rps", "10",
                 "--duration", "2", "--time-scale", "3", "--json", str(out), "--workdir", str(tmp_path / "w")])
    result = json.loads(out.read_text())
    assert code == 0, result
    assert result["requests"] > 0 and result["errors"] == 0
    assert result["limits_held"] and result["peak_per_backend_max"] <= result["max_concurrency"]
    assert result["leases_left"] == 0
    assert result["inversions"]["inverted"] == 0
    assert result["redis_scripts_per_request"] >= 2  # enqueue and release, at least


def test_a_ticket_that_leaves_and_comes_back_was_not_granted() -> None:
    inv = Inversions()
    inv.observe({b"a": 1, b"b": 2}, {b"a": 1})  # b left past a: counted, for now
    assert (inv.grants_seen, inv.inverted) == (1, 1)
    inv.observe({b"a": 1}, {b"a": 1, b"b": 2})  # b is back (dropped, queued again): no grant
    assert (inv.grants_seen, inv.inverted, inv.overtaken_pairs, inv.requeued) == (0, 0, 0, 1)
