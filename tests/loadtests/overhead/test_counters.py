"""What ``bench overhead`` reads around a step: Redis commands (server counters and
MONITOR) and the children it starts (against the test session's own Valkey)."""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis

from loadtests.overhead import redisstats
from loadtests.overhead.targets import Child, TargetError


def test_the_delta_leaves_out_our_own_info_calls_and_idle_commands() -> None:
    before = Counter({"info": 3, "evalsha": 10, "get": 5})
    after = Counter({"info": 9, "evalsha": 14, "get": 5, "hset": 2})
    assert redisstats.delta(before, after) == {"evalsha": 4, "hset": 2}


def test_command_calls_count_what_the_server_ran(embedded_redis_url: str) -> None:
    before = redisstats.command_calls(embedded_redis_url)
    client = redis.Redis.from_url(embedded_redis_url)
    try:
        client.set(f"overhead-test-{uuid.uuid4().hex}", "1", ex=60)
    finally:
        client.close()
    calls = redisstats.delta(before, redisstats.command_calls(embedded_redis_url))
    assert calls.get("set", 0) >= 1 and "info" not in calls


def test_round_trips_tell_client_commands_from_those_a_script_runs(embedded_redis_url: str) -> None:
    monitor = redisstats.RoundTrips(embedded_redis_url)
    monitor.start()
    client = redis.Redis.from_url(embedded_redis_url)
    try:
        client.eval("return redis.call('SET', KEYS[1], '1', 'EX', 60)", 1, f"overhead-test-{uuid.uuid4().hex}")
    finally:
        client.close()
        commands = monitor.stop()
    assert commands.get("eval") == 1  # one round trip
    assert monitor.lua.get("set") == 1  # run inside the server: not a round trip
    assert "set" not in commands and "echo" not in commands  # nor the stop marker


def test_a_child_that_exits_is_reported_with_its_code_and_log(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAGE_CONFIG", "leaks-in")
    log = tmp_path / "logs" / "child.log"
    code = "import os, sys; print(sorted(k for k in os.environ if k.startswith('TRIAGE_'))); sys.exit(3)"
    child = Child("probe", [sys.executable, "-c", code], log, env={"TRIAGE_OWN": "1"})
    child.spawn()
    with pytest.raises(TargetError, match=f"probe exited with code 3; see {log}"):
        child.wait_ready(lambda: False, 30.0)
    child.stop()
    child.stop()  # safe twice
    assert log.read_text().strip() == "['TRIAGE_OWN']"  # the runner's TRIAGE_* settings stay out
