"""The relay experiments: which level's rate counts (no processes: the steps are
stubbed), and the micro-benchmark loading the relay from a checkout, in either layout."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from loadtests.overhead import relay, relaymicro
from loadtests.overhead.steps import Workload
from loadtests.overhead.targets import Target

ROOT = Path(__file__).resolve().parents[3]


def test_the_answer_is_the_best_rate_before_the_first_level_that_misses(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    # added ITL p99 per level: 0.2 ms (within), 3 ms (miss), 0.1 ms (within again, but after a miss)
    itl = {("direct", 10): 1.0, ("gw", 10): 1.2, ("direct", 20): 1.0, ("gw", 20): 4.0,
           ("direct", 40): 1.0, ("gw", 40): 1.1}
    rate = {10: 1000.0, 20: 2000.0, 40: 4000.0}

    def step(target: Target, level: int, *args: Any) -> dict[str, Any]:
        return {"chunks_per_s": rate[level], "itl_ms": {"p99": itl[(target.name, level)]}, "errors": 0}

    monkeypatch.setattr(relay, "relay_step", step)
    calls: list[str] = []
    direct, gateway = Target("direct", "http://127.0.0.1:1", None), Target("gw", "http://127.0.0.1:2", None)
    out = relay.relay_experiment(direct, gateway, [10, 20, 40], 1.0, 100, Workload(), [], tmp_path,
                                 log=lambda _: None, between=lambda: calls.append("pause"))
    assert [row["within_bound"] for row in out["levels"]] == [True, False, True]
    assert out["relay_chunks_per_s"] == 1000.0  # not 4000: levels after the first miss do not count
    assert len(calls) == 6  # a pause before every step, so each starts from a settled machine


def test_the_relay_is_found_in_this_tree_and_in_an_older_layout(tmp_path: Path) -> None:
    assert relaymicro.relay_file(ROOT) == ROOT / "gateway" / "request" / "relay.py"
    older = tmp_path / "older"
    (older / "gateway").mkdir(parents=True)
    shutil.copy(ROOT / "gateway" / "request" / "relay.py", older / "gateway" / "relay.py")
    assert relaymicro.relay_file(older) == older / "gateway" / "relay.py"
    with pytest.raises(SystemExit, match="no relay module"):
        relaymicro.relay_file(tmp_path / "empty")


def test_two_copies_of_one_relay_relay_the_same_bytes() -> None:
    out = asyncio.run(relaymicro.run(ROOT, ROOT, events=20, rounds=1))
    assert set(out["ns_per_event_median"]) == set(relaymicro.FRAMINGS)
    for row in out["ns_per_event_median"].values():
        assert row["relayed_bytes"]["before"] == row["relayed_bytes"]["after"] > 0
        assert row["ratio_after_over_before"] > 0
