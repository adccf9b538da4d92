"""``triage predictor warm-start``: the split of the public data, the build, and the
day-one evaluation — on a small data folder of the same shape."""

from __future__ import annotations

import zlib
from pathlib import Path

import orjson
import pytest

from scheduler.predictor import warm_start
from scheduler.predictor.tools import warm_start as tool

SHORT = ["Translate 'hello' into French.", "What is 2 + 2?", "Name a colour.", "Say hi.", "Spell cat."]
LONG = ["Write a detailed essay on the history of Rome.", "Write a long story about a dragon and a knight.",
        "Explain in depth how a compiler works, with examples.", "Write a full report on climate change."]


def rows(prefix: str, n: int, **extra: object) -> list[dict]:
    out = []
    for i in range(n):
        long = i % 3 == 0
        prompt = (LONG if long else SHORT)[i % (len(LONG) if long else len(SHORT))] + f" ({prefix} {i})"
        out.append({"id": f"{prefix}-{i}", "prompt": prompt, "response_tokens_cl100k": 900 + i if long else 10 + i,
                    **extra})
    return out


def write(path: Path, data: list[dict]) -> None:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in data) + b"\n")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder / "sharegpt_v3_first_turn.part01.jsonl", rows("sg1", 40))
    write(folder / "sharegpt_v3_first_turn.part03.jsonl", rows("sg3", 6))
    alpaca = rows("alpaca", 4)
    for r in alpaca:  # several generators' lengths: it teaches their geometric mean
        r["response_tokens_cl100k_by_model"] = {"x": 100, "y": 400}
    write(folder / "alpaca_eval_multi_model_lengths.jsonl", alpaca)
    write(folder / "gsm8k.part01.jsonl", rows("gsm1", 5))
    write(folder / "gsm8k.part02.jsonl", rows("gsm2", 5))
    write(folder / "humaneval.jsonl", rows("he", 3))
    return folder


def held_out(row_id: str) -> bool:
    return zlib.crc32(row_id.encode()) % 5 == 0


def test_the_split_holds_out_a_fifth_of_part01_part03_and_gsm8k_part02(data: Path) -> None:
    training, chat, math_rows = tool.split(data)
    train_ids, chat_ids = {r["id"] for r in training}, {r["id"] for r in chat}
    part01 = {f"sg1-{i}" for i in range(40)}
    assert chat_ids == {i for i in part01 if held_out(i)} | {f"sg3-{i}" for i in range(6)}
    assert 0 < len(chat_ids & part01) < 40
    assert not train_ids & chat_ids  # a held-out row never trains it
    assert {i for i in part01 if not held_out(i)} <= train_ids
    assert {"alpaca-0", "gsm1-0", "he-0"} <= train_ids
    assert {r["id"] for r in math_rows} == {f"gsm2-{i}" for i in range(5)}
    alpaca = next(r for r in training if r["id"] == "alpaca-0")
    assert alpaca["response_tokens_cl100k"] == 200  # sqrt(100 x 400)


def test_build_writes_a_warm_start_that_loads(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "warm.json.gz"
    summary = tool.build(data, out)
    training, _, _ = tool.split(data)
    assert summary["rows"] == len(training) and summary["epochs"] == tool.EPOCHS
    values = warm_start.load(out)
    assert len(values) == summary["fields"] and summary["bytes"] == out.stat().st_size
    assert values["n"] == len(training) * tool.EPOCHS  # every observation of every epoch
    assert all(warm_start.keep(f) for f in values)
    assert tool.build(data, tmp_path / "again.json.gz")["bytes"] == summary["bytes"]
    assert (tmp_path / "again.json.gz").read_bytes() == out.read_bytes()  # a rebuild is byte-identical


def test_the_command_builds_and_evaluates(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "warm.json.gz"
    assert tool.main(["build", "--data", str(data), "--out", str(out)]) == 0
    assert orjson.loads(capsys.readouterr().out)["fields"] > 0
    assert tool.main(["evaluate", "--data", str(data), "--warm", str(out), "--teach", "3", "--json"]) == 0
    figures = orjson.loads(capsys.readouterr().out)
    _, chat, math_rows = tool.split(data)
    assert (figures["teach"], figures["scored_chat"], figures["scored_math"]) == (3, len(chat) - 3, len(math_rows))
    for name in ("cold", "warm"):
        for stage in ("day_one_chat", "taught_chat", "day_one_math"):
            assert figures[name][stage]["n"] > 0 and -1 <= figures[name][stage]["kendall_tau"] <= 1
    assert tool.main(["evaluate", "--data", str(data), "--warm", str(out), "--teach", "3"]) == 0
    assert "cold day one, chat" in capsys.readouterr().out


def test_without_data_the_command_says_where_to_find_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tool.main(["build", "--data", str(tmp_path), "--out", str(tmp_path / "w.json.gz")]) == 2
    assert "--data" in capsys.readouterr().err
    assert not (tmp_path / "w.json.gz").exists()
