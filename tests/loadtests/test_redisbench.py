"""``triage bench redis``: a tiny run keeps its JSON contract, and an uncontended request
stays within its command budget (a count, not a time)."""

from __future__ import annotations

import json
from pathlib import Path

from triage.cli import main


def test_a_smoke_run_writes_the_rows(tmp_path: Path, embedded_redis_url: str) -> None:
    out = tmp_path / "redis.json"
    code = main([
        "bench", "redis", "--backends", "1,8", "--queued", "0,5", "--seconds", "0.2", "--concurrency", "2",
        "--redis-url", embedded_redis_url, "--json", str(out),  # the session's own server: no other client
    ])
    assert code == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["backends"], r["queued"]) for r in rows] == [(1, 0), (1, 5), (8, 0), (8, 5)]
    for r in rows:
        assert r["requests"] > 0 and r["scheduled_per_s"] > 0
        assert r["commands_per_request"] > 0
    # enqueue-and-grant + release of an uncontended request: at most 20 Redis commands
    assert all(r["commands_per_request"] <= 20 for r in rows if r["queued"] == 0), rows
