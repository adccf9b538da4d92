"""Prometheus's own checker on the shipped files: the scrape config, the alert rules and
their unit tests (``promtool test rules``). Skipped where promtool is not installed
(``.ci/run`` installs it from the distribution's ``prometheus`` package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

PROMETHEUS = ROOT / "deploy/prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_check_config() -> None:
    for path in sorted(PROMETHEUS.glob("*.yml")):
        if path.name.endswith(".test.yml") or path.name == "alerts.yml":
            continue
        result = promtool("check", "config", path.name)
        assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_check_rules() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_rule_unit_tests() -> None:
    result = promtool("test", "rules", "alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_a_broken_rule_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: rate(foo[5m]\n")
    assert promtool("check", "rules", str(bad)).returncode != 0


def test_the_rules_name_exported_metrics() -> None:
    """Each metric an alert reads is one /metrics defines (or a recording rule's)."""
    import re

    import yaml

    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    names = {m for e in exprs for m in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{\[]", e)} - {"rate"}
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert {"TriageQueueWaitHigh", "TriageBackendDown", "TriageRejectionRateHigh", "TriageTTFTBudgetBurnFast"} <= alerts
    known = recorded | {
        "gen_ai_server_time_to_first_token_seconds_bucket", "gen_ai_server_time_to_first_token_seconds_count",
        "triage_queue_wait_seconds_bucket", "triage_backend_health", "triage_requests_total",
    }
    assert names <= known, names - known
