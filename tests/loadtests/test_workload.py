"""Workload files: the built-in ones load, mistakes give one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from loadtests.workload import Api, WorkloadError, builtin_workloads, load_workload, parse_workload

GOOD = {
    "name": "w",
    "classes": [
        {"name": "short", "share": 0.8, "prompts": ["gsm8k"], "output": {"from": "dataset", "max": 400},
         "slo": {"ttft_s": 0.5, "tpot_s": 0.05}},
        {"name": "long", "share": 0.2, "output": {"from": "uniform", "min": 1000, "max": 2000}},
    ],
}


def test_builtin_workloads_all_parse() -> None:
    names = builtin_workloads()
    assert {"mixed", "azure-conv", "synthetic"} <= set(names)
    for name in names:
        w = load_workload(name)
        assert w.classes


def test_mixed_is_80_20_with_slos() -> None:
    w = load_workload("mixed")
    assert [(c.name, c.share) for c in w.classes] == [("short", 0.8), ("long", 0.2)]
    assert w.cls("short").slo.ttft_s == 0.5 and w.cls("short").slo.tpot_s == 0.05
    assert w.api is Api.CHAT


def test_good_workload_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    w = load_workload(str(path))
    assert w.cls("long").output.kind == "uniform"
    assert w.cls("long").prompts == ("synthetic",)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, "workload.colour: unknown key"),
        ({"classes": []}, "classes: required"),
        ({"api": "grpc"}, "api: must be chat or completions"),
        ({"classes": [{"share": 1}]}, r"classes\[0\].name: required"),
        ({"classes": [{"name": "a", "prompts": ["wikipedia"]}]}, "unknown source 'wikipedia'"),
        ({"classes": [{"name": "a", "output": {"from": "normal"}}]}, r"classes\[0\].output.from"),
        ({"classes": [{"name": "a", "output": {"min": 10, "max": 5}}]}, "min: must not exceed max"),
        ({"classes": [{"name": "a", "share": -1}]}, r"classes\[0\].share: must be >= 0"),
        ({"classes": [{"name": "a", "slo": {"ttft": 1}}]}, r"classes\[0\].slo.ttft: unknown key"),
        ({"classes": [{"name": "a"}, {"name": "a"}]}, "names must be unique"),
        ({"classes": [{"name": "a", "share": 0}]}, "shares must add up"),
        ({"trace": {"format": "csv", "file": "x"}}, "trace.format"),
        ({"tenants": [{"share": 1}]}, r"tenants\[0\].key: required"),
    ],
)
def test_mistakes_name_the_key(change: dict, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_workload({**GOOD, **change})


def test_unknown_name_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="unknown workload 'nope'"):
        load_workload("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("classes: [unclosed")
    with pytest.raises(WorkloadError, match="not valid YAML"):
        load_workload(str(bad))
    with pytest.raises(WorkloadError, match="No such file"):
        load_workload(str(tmp_path / "missing.yaml"))
