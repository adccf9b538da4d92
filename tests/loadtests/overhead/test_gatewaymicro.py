"""The gateway's instruction count: what the idle rate accounts for is taken off, per request."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.overhead import gatewaymicro
from loadtests.overhead.gatewaymicro import Counted
from loadtests.overhead.targets import triage_child

ROOT = Path(__file__).resolve().parents[3]


def test_the_background_of_the_busy_time_is_taken_off_per_request() -> None:
    # 100 requests in 8 s counted 400M; nothing for 4 s counted 2M: 4M of the 400M is background
    assert Counted(requests=100, busy=400_000_000, busy_s=8.0, idle=2_000_000, idle_s=4.0).per_request() == 3_960_000
    assert Counted(requests=10, busy=1_000, busy_s=1.0, idle=0, idle_s=0.0).per_request() == 100  # no idle window


def test_the_quiet_timers_are_settings_the_gateway_accepts() -> None:
    from gateway.settings import Settings

    settings = Settings.model_validate({**gatewaymicro.QUIET, "backends": []})
    assert settings.heartbeat_s * 3 < settings.lease_ttl_s  # leases do not lapse while it is measured
    assert settings.probe_interval_s >= 60 and settings.predictor_sync_s >= 60


def test_real_prompts_become_one_body_each_up_to_the_requests_counted(tmp_path: Path) -> None:
    import argparse
    import json

    from loadtests.overhead.steps import Workload

    rows = tmp_path / "prompts.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"question {i}?", "id": i}) + "\n" for i in range(5)))
    args = argparse.Namespace(prompts=rows, requests=3, stream=True)
    bodies = [json.loads(body) for body in gatewaymicro.read_bodies(Workload(), args)]
    assert [body["messages"] for body in bodies] == [[{"role": "user", "content": f"question {i}?"}] for i in range(3)]
    assert all(body["stream"] is True and body["max_tokens"] == Workload().max_tokens for body in bodies)


def test_without_valgrind_it_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gatewaymicro.shutil, "which", lambda name: None)
    assert gatewaymicro.main([]) == 2
    assert "valgrind" in capsys.readouterr().err


def test_a_baseline_gateway_runs_its_own_trees_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--baseline``/``--before``: the child runs the other tree's ``triage``, not this
    checkout's, though it is started from this checkout (where ``python -m`` finds this
    checkout's first, whatever ``PYTHONPATH`` says)."""
    tree = tmp_path / "tree"
    (tree / "triage").mkdir(parents=True)
    (tree / "triage" / "__init__.py").write_text("")
    (tree / "triage" / "__main__.py").write_text("import triage, sys; print('ran', triage.__file__, sys.argv[1:])\n")
    monkeypatch.chdir(ROOT)  # where the benchmarks are run from
    log = tmp_path / "child.log"
    child = triage_child("baseline", tmp_path / "c.yaml", log, tree)
    child.spawn()
    assert child.proc is not None and child.proc.wait(timeout=60) == 0, log.read_text()
    assert f"ran {tree / 'triage' / '__init__.py'} ['serve', '--config'" in log.read_text()
