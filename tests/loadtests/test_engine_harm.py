"""The do-no-harm tally: each arm's worst figure against FIFO per repeat, beside FIFO's twin."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests.engines.harm import markdown, more_than_noise, pooled, tally, worst_against


def run(mode: str, repeat: int, short_mean: float = 1.0, long_p99: float = 10.0, tps: float = 100.0,
        load: float = 1.0) -> dict:
    return {"mode": mode, "repeat": repeat, "load": load,
            "classes": {"short": {"e2e_mean_s": short_mean}, "medium": {"e2e_p99_s": 5.0},
                        "long": {"e2e_p99_s": long_p99}},
            "overall": {"output_tps": tps}}


def test_the_worst_figure_counts_and_lower_throughput_is_worse() -> None:
    fifo = run("fifo", 0)
    assert worst_against(run("x", 0, long_p99=12.0), fifo) == (1.2, "long E2E p99")
    ratio, name = worst_against(run("x", 0, tps=80.0), fifo)  # a fifth less throughput: 1.25 times worse
    assert (round(ratio, 3), name) == (1.25, "output TPS")
    assert worst_against(run("x", 0, short_mean=0.5, long_p99=5.0, tps=200.0), fifo) == (1.0, "medium E2E p99")


def test_each_repeat_is_read_against_its_own_fifo_and_direct_is_no_arm() -> None:
    runs = [run("fifo", 0), run("fifo_twin", 0, short_mean=1.05), run("arm", 0, short_mean=1.5), run("direct", 0),
            run("fifo", 1, short_mean=2.0), run("fifo_twin", 1, short_mean=2.5), run("arm", 1, short_mean=2.1),
            run("arm", 2, short_mean=9.0)]  # repeat 2 has no FIFO: nothing to read it against
    found = tally(runs)
    assert set(found) == {("fifo_twin", 1.0), ("arm", 1.0)}
    assert [round(r, 3) for r, _ in found[("arm", 1.0)].worst] == [1.5, 1.05]
    assert found[("arm", 1.0)].over() == 1 and found[("fifo_twin", 1.0)].over() == 1


def test_files_are_pooled_without_merging_their_repeats(tmp_path: Path) -> None:
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    one.write_text(json.dumps({"runs": [run("fifo", 0), run("arm", 0, long_p99=20.0)]}))
    two.write_text(json.dumps({"runs": [run("fifo", 0, long_p99=20.0), run("arm", 0, long_p99=20.0),
                                        run("fifo", 0, load=0.9), run("arm", 0, load=0.9)]}))
    found = pooled([one, two])
    assert [r for r, _ in found[("arm", 1.0)].worst] == [2.0, 1.0]  # each file's repeat 0 against its own FIFO
    table = markdown(found)
    assert "| `arm` | 1 | 2 | 1 | 50% | 2.00× (long E2E p99) |  |" in table  # no twin at that load: no p
    assert "| `arm` | 0.9 | 1 | 0 | 0% |" in table


def test_the_chance_of_as_many_breaks_from_noise_alone() -> None:
    assert more_than_noise(3, 3, 0, 3) == 1 / 20  # all three breaks fell to the arm: 1 way in C(6, 3)
    assert more_than_noise(0, 3, 2, 3) == 1.0  # no break: nothing to explain
    assert more_than_noise(1, 2, 1, 2) == 5 / 6  # 1 - P(both breaks fell to the twin) = 1 - 1/6
    assert more_than_noise(2, 6, 12, 32) > 0.5 > more_than_noise(27, 35, 12, 32)
