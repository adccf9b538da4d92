"""``triage bench chaos``: its flags, and a whole run with small counts. The run's stack
is the in-process one of this folder (the real one starts a simulator and two gateways
as processes: tests/robustness); fuzz, storm and slow clients go to it as in a real run,
and the report is written as JSON."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtests.chaos import cli
from loadtests.chaos.checks import Target
from tests.loadtests.chaos.serving import serving_replica


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_defaults_are_the_long_form() -> None:
    args = _args()
    assert (args.seed, args.fuzz_cases, args.storm_clients, args.slow_clients) == (1, 20_000, 1000, 200)
    assert (args.soak_s, args.rate, args.slots) == (600.0, 20.0, 4)
    assert args.redis_url is None and args.tracemalloc_every_s is None
    assert args.out == Path("chaos-results.json")


def test_a_small_run_writes_every_phase_and_exits_0(
    tmp_path: Path, redis_url: str, chaos_sim: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: dict[str, Any] = {}

    @contextlib.contextmanager
    def in_process_stack(workdir: Path, replicas: int, slots: int, url: str | None,
                         every_s: float | None) -> Iterator[tuple[list[Target], list[Any]]]:
        asked.update(replicas=replicas, slots=slots, redis_url=url, workdir=workdir)
        with serving_replica(redis_url, chaos_sim, slots) as first, serving_replica(redis_url, chaos_sim, slots) as second:
            yield [first, second], []

    monkeypatch.setattr(cli, "chaos_stack", in_process_stack)
    out = tmp_path / "chaos.json"
    args = _args("--fuzz-cases", "24", "--storm-clients", "6", "--slow-clients", "3", "--soak-s", "0.5",
                 "--rate", "4", "--slots", "3", "--redis-url", redis_url, "--out", str(out))
    assert cli.run(args) == 0
    assert asked["replicas"] == 2 and asked["slots"] == 3 and asked["redis_url"] == redis_url
    assert not asked["workdir"].exists()  # a temporary folder, removed after the run

    report = json.loads(out.read_text())
    assert set(report) == {"fuzz", "storm", "slow", "soak"}
    fuzz = report["fuzz"]
    assert fuzz["cases"] == 24 and fuzz["failures"] == [] and fuzz["server_errors"] == 0
    assert fuzz["leftovers_clean"] is True and fuzz["normal_after"] == 200
    assert fuzz["by_category"]["valid"] == {"200": 2}
    storm = report["storm"]
    assert storm["clients"] == 6 and sum(storm["plans"].values()) == 6
    assert storm["server_errors"] == 0 and storm["leftovers_clean"] is True and storm["normal_after"] == 200
    slow = report["slow"]
    assert slow["clients"] == 3 and slow["statuses"] == {k: {"408": 1} for k in ("head", "body", "silent")}
    assert slow["health_during"] == 200 and slow["normal_during"] == 200
    soak = report["soak"]
    assert (soak["sent"], soak["ok"], soak["failed"]) == (2, 2, {})  # 0.5 s at 4/s
    assert soak["leftovers_clean"] is True

