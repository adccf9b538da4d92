"""The engine-speed probe: fixed work straight to an engine (a real simulator on loopback)."""

import asyncio

from loadtests.engines import speed
from loadtests.engines.pairs import value
from simulator.settings import SimSettings
from simulator.testing import running_simulator

MODEL = "tiny-llama"


def test_the_fixed_work_is_exactly_the_tokens_asked_of_every_stream() -> None:
    with running_simulator(SimSettings(profile="fast", model=MODEL)) as url:
        made, wall = asyncio.run(speed.timed(url, MODEL, streams=3, tokens=17))
        assert made == 3 * 17 and wall > 0
        assert speed.measure(url, MODEL, streams=2, tokens=5, rounds=2) > 0


def test_the_work_is_greedy_and_ignores_the_end_of_sequence() -> None:
    w = speed.work(MODEL, 0, 9)
    assert (w["max_tokens"], w["ignore_eos"], w["temperature"], w["stream"]) == (9, True, 0, False)
    assert speed.work(MODEL, 0)["messages"] != speed.work(MODEL, 1)["messages"]


def test_an_arm_is_read_by_its_slower_side_against_the_capacitys_speed() -> None:
    row = {"engine_speed": speed.beside(before=600.0, after=450.0, reference=500.0)}
    assert row["engine_speed"] == {"before": 600.0, "after": 450.0, "vs_capacity": 0.9}
    assert value(row, "engine_speed", "vs_capacity") == 0.9
    assert speed.beside(1.0, 1.0, 0.0)["vs_capacity"] == 0.0
    assert value({}, "engine_speed", "vs_capacity") is None
