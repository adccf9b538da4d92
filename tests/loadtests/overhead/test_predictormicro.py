"""The predictor's micro-benchmark: two trees side by side, and the same learned state from the same code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.overhead import predictormicro

ROOT = Path(__file__).resolve().parents[3]


def _data(folder: Path) -> Path:
    prompts = ["Write a long essay about the sea, in 800 words.", "What is 2 + 2?", "def add(a, b):\n    return a"]
    for name in predictormicro.FILES:
        rows = [{"prompt": f"{p} ({name} {i})", "response_tokens_cl100k": 10 + 100 * i} for i, p in enumerate(prompts)]
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_the_same_tree_twice_learns_the_same(tmp_path: Path) -> None:
    result = predictormicro.compare({"this": ROOT, "before": ROOT}, _data(tmp_path), per_file=3, rounds=1, count=False)
    assert result["this"]["digest"] == result["before"]["digest"]
    assert result["this"]["cpu_us_best"] > 0 and "instructions" not in result["this"]


def test_a_different_model_shows_in_the_digest(tmp_path: Path) -> None:
    data = _data(tmp_path)
    one = predictormicro.work(ROOT, data, per_file=3, passes=1)
    two = predictormicro.work(ROOT, data, per_file=3, passes=2)  # learned more: another state
    assert one["requests"] == 9 and len(two["seconds"]) == 2 and one["digest"] != two["digest"]


def test_a_counted_run_leaves_the_digest_out(tmp_path: Path) -> None:
    """Writing every learned sum as text costs more the more sums a run changed: in a counted
    run it would enter the difference between one pass and two as if requests cost it."""
    run = predictormicro.work(ROOT, _data(tmp_path), per_file=3, passes=1, digest=False)
    assert run["digest"] is None and run["requests"] == 9


def test_instructions_are_read_from_callgrinds_summary() -> None:
    assert predictormicro.instructions("events: Ir\nfl=x\nsummary: 7035809121\n") == 7035809121
    assert predictormicro.instructions("events: Ir\ntotals: 12\n") == 12
    assert predictormicro.instructions("events: Ir\nsummary: 0\ntotals: 202905839\n") == 202905839  # a dump
    with pytest.raises(ValueError):
        predictormicro.instructions("events: Ir\n")


def test_missing_data_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert predictormicro.main(["--data-dir", str(tmp_path)]) == 2
    assert "gsm8k.part01.jsonl" in capsys.readouterr().err
