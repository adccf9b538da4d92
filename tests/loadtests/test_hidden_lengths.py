"""Workloads that hide lengths: prompts only on the wire, one true length per prompt, and a
length table that makes the simulator stop every reply there."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadtests.client import Target, request_body, request_headers
from loadtests.compare_runs import hidden_lengths_table
from loadtests.datasets import SOURCE_FILES, PromptCatalog
from loadtests.length_table import FILE_NAME, read_length_table, write_length_table
from loadtests.requests import Part, RequestFactory, part_of
from loadtests.workload import Api, Lengths, WorkloadError, load_workload, parse_workload

GENERATOR = "verbose-model"
HIDDEN = {
    "name": "hidden",
    "lengths": "hidden",
    "classes": [
        {"name": "chat", "share": 0.9, "prompts": "sharegpt", "output": {"from": "dataset"}},
        {"name": "essay", "share": 0.1, "prompts": "alpaca", "generator": GENERATOR,
         "output": {"from": "dataset", "min": 1025}},
    ],
}


def _write(path: Path, rows: list[dict]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A small data folder in the shared/data layout: 60 ShareGPT prompts (one listed twice
    with two lengths) and 12 AlpacaEval prompts, of which the generator wrote 6 long replies."""
    d = tmp_path / "data"
    d.mkdir()
    chat = [{"prompt": f"question number {i} about topic {i % 7}", "prompt_tokens_cl100k": 8,
             "response_tokens_cl100k": 20 + 15 * i} for i in range(60)]
    chat.append({"prompt": "question number 3 about topic 3", "prompt_tokens_cl100k": 8,
                 "response_tokens_cl100k": 999})  # the same prompt again, another reply
    first, second = SOURCE_FILES["sharegpt"]
    _write(d / first, chat[:30])
    _write(d / second, chat[30:])
    alpaca = [{"prompt": f"write a long report on subject {i}", "prompt_tokens_cl100k": 9,
               "response_tokens_cl100k": 300,
               "response_tokens_cl100k_by_model": {GENERATOR: 1100 + 50 * i if i % 2 else 400, "other": 10}}
              for i in range(12)]
    _write(d / SOURCE_FILES["alpaca"][0], alpaca)
    return d


def factory(data_dir: Path, seed: int = 0, part: Part = Part.ALL) -> RequestFactory:
    return RequestFactory(parse_workload(HIDDEN), PromptCatalog(data_dir), seed, part)


def test_the_builtin_honest_workload_hides_lengths_and_mixed_tells_them() -> None:
    honest = load_workload("sharegpt-chat")
    assert honest.lengths is Lengths.HIDDEN
    assert all(c.output.kind == "dataset" for c in honest.classes)
    assert honest.cls("alpaca").generator == "gpt-4o-2024-05-13" and honest.cls("alpaca").output.min == 1025
    mixed = load_workload("mixed")
    assert mixed.lengths is Lengths.MAX_TOKENS
    assert "client tells the length" in mixed.description


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lengths": "maybe"}, "lengths: must be max_tokens or hidden"),
        ({"classes": [{"name": "a", "prompts": "gsm8k", "output": {"from": "uniform"}}]},
         r"classes\[0\].output.from: lengths: hidden needs dataset"),
        ({"classes": [{"name": "a", "prompts": "synthetic", "output": {"from": "dataset"}}]},
         r"classes\[0\].output.from"),
        ({"trace": {"format": "azure", "file": "x.csv"}}, "not a trace"),
        ({"classes": [{"name": "a", "prompts": "sharegpt", "generator": "m", "output": {"from": "dataset"}}]},
         r"classes\[0\].generator: a model name, and only with prompts: alpaca"),
    ],
)
def test_hidden_workload_mistakes(change: dict, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_workload({**HIDDEN, **change})


def test_requests_carry_no_max_tokens_and_the_oracle_header_only_when_asked(data_dir: Path) -> None:
    reqs = [factory(data_dir).next(i) for i in range(50)]
    for req in reqs:
        assert not req.send_max_tokens
        body = request_body(req, Target(("http://127.0.0.1:1",), "m", Api.CHAT))
        assert "max_tokens" not in body and "ignore_eos" not in body and "max_completion_tokens" not in body
        assert body["messages"] == [{"role": "user", "content": req.prompt}]
        assert "x-triage-oracle-tokens" not in request_headers(req, oracle=False)
        assert request_headers(req)["x-triage-oracle-tokens"] == str(req.max_tokens)


def test_each_prompt_has_one_true_length_from_its_dataset_row(data_dir: Path) -> None:
    f = factory(data_dir)
    table = f.true_lengths()
    assert table["question number 3 about topic 3"] == 20 + 15 * 3  # the first row of a repeated prompt
    essays = {p: n for p, n in table.items() if p.startswith("write a long report")}
    # the generator's lengths, and only its replies over 1,024 tokens
    assert essays == {f"write a long report on subject {i}": 1100 + 50 * i for i in range(1, 12, 2)}
    reqs = [f.next(i) for i in range(400)]
    assert all(table[r.prompt] == r.max_tokens for r in reqs)
    assert {r.cls for r in reqs} == {"chat", "essay"}


def test_training_and_measured_prompts_are_disjoint(data_dir: Path) -> None:
    train = {r.prompt for r in (factory(data_dir, 1, Part.TRAIN).next(i) for i in range(300))}
    measured = {r.prompt for r in (factory(data_dir, 0, Part.MEASURE).next(i) for i in range(300))}
    assert train and measured and not train & measured
    assert all(part_of(p) is Part.TRAIN for p in train)
    table = factory(data_dir).true_lengths()
    assert train | measured <= set(table)  # the table covers both parts


def test_a_class_without_real_lengths_is_not_sent(tmp_path: Path) -> None:
    # no data folder: ShareGPT falls back to the shipped sample; no generator has lengths there
    f = RequestFactory(parse_workload(HIDDEN), PromptCatalog(tmp_path / "none"), 0)
    reqs = [f.next(i) for i in range(100)]
    assert {r.cls for r in reqs} == {"chat"}
    only_essays = {**HIDDEN, "classes": HIDDEN["classes"][1:]}
    with pytest.raises(WorkloadError, match="no prompt rows with real reply lengths"):
        RequestFactory(parse_workload(only_essays), PromptCatalog(tmp_path / "none"), 0)


def test_compare_writes_the_table_of_the_trace_it_sends(tmp_path: Path, data_dir: Path) -> None:
    from loadtests.compare_options import CompareConfig
    from loadtests.stack import SimSpec

    cfg = CompareConfig("hidden", (0.9,), ("direct",), SimSpec(), 1, 5.0, 5.0, 0.0, 5.0, None, 0, data_dir,
                        tmp_path / "out", tmp_path / "out" / "c.json", True)
    catalog = PromptCatalog(data_dir)
    path = hidden_lengths_table(cfg, parse_workload(HIDDEN), catalog)
    assert path == (tmp_path / "out" / FILE_NAME).resolve()
    table = read_length_table(path)
    for seed, part in ((0, Part.MEASURE), (1, Part.TRAIN), (7, Part.MEASURE)):  # measured, training, capacity
        f = RequestFactory(parse_workload(HIDDEN), catalog, seed, part)
        assert all(table[r.prompt] == r.max_tokens for r in (f.next(i) for i in range(200)))
    assert hidden_lengths_table(cfg, load_workload("mixed"), catalog) is None


def test_length_table_command(tmp_path: Path, data_dir: Path) -> None:
    from loadtests.__main__ import main

    hidden = tmp_path / "hidden.yaml"
    hidden.write_bytes(orjson.dumps(HIDDEN))  # JSON is YAML
    out = tmp_path / "t.jsonl"
    assert main(["length-table", "--workload", str(hidden), "--data-dir", str(data_dir), "--out", str(out)]) == 0
    assert read_length_table(out) == factory(data_dir).true_lengths()
    assert main(["length-table", "--workload", "mixed", "--out", str(out)]) == 2


async def test_the_simulator_stops_each_reply_at_its_true_length(tmp_path: Path, data_dir: Path) -> None:
    from loadtests.arrivals import ArrivalSpec, Process
    from loadtests.plan import LoadConfig, execute
    from loadtests.runner import Limits
    from simulator.settings import SimSettings
    from simulator.testing import running_simulator

    workload = parse_workload(HIDDEN)
    table = write_length_table(tmp_path / FILE_NAME, factory(data_dir).true_lengths())
    with running_simulator(SimSettings(profile="fast", length_table=str(table))) as url:
        cfg = LoadConfig(Target((url,), "sim-model", Api.CHAT), workload,
                         ArrivalSpec(Process.CONCURRENCY, concurrency=8), Limits(120.0, 24, 60.0), data_dir=data_dir)
        result = await execute(cfg)
    assert len(result.records) == 24
    assert all(r.ok and r.output_tokens == r.planned_tokens for r in result.records)
    assert len({r.planned_tokens for r in result.records}) > 5  # not one length for all


def test_a_share_of_the_long_replies_is_asked_for_whole_and_the_same_in_every_arm(data_dir: Path) -> None:
    """``unstreamed``: about that share of the replies past ``over_tokens`` go without
    streaming (no stream options); short ones and the rest stream as the target does; two
    plans of one seed pick the same requests."""
    workload = parse_workload({**HIDDEN, "unstreamed": {"share": 0.33, "over_tokens": 1024}})
    first, second = (RequestFactory(workload, PromptCatalog(data_dir), 0) for _ in range(2))
    plan, again = [first.next(i) for i in range(600)], [second.next(i) for i in range(600)]
    assert [r.stream for r in plan] == [r.stream for r in again]
    long = [r for r in plan if r.max_tokens > 1024]
    whole = [r for r in long if r.stream is False]
    assert all(r.stream is None for r in plan if r.max_tokens <= 1024)
    assert len(long) > 30 and 0.2 < len(whole) / len(long) < 0.46
    target = Target(("http://127.0.0.1:1",), "m", Api.CHAT, stream=True)
    body = request_body(whole[0], target)
    assert body["stream"] is False and "stream_options" not in body
    streamed = request_body(next(r for r in long if r.stream is None), target)
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("unstreamed", "message"),
    [({"share": 1.5}, "unstreamed.share"), ({"over_tokens": 10}, "unstreamed.share"),
     ({"share": 0.3, "every": 2}, "unstreamed.every: unknown key")],
)
def test_an_unstreamed_share_mistake_names_the_key(unstreamed: dict, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_workload({**HIDDEN, "unstreamed": unstreamed})


def test_the_batch_variant_of_the_honest_workload_leaves_a_third_of_its_long_replies_unstreamed() -> None:
    batch, honest = load_workload("sharegpt-chat-batch"), load_workload("sharegpt-chat")
    assert batch.unstreamed is not None and (batch.unstreamed.share, batch.unstreamed.over_tokens) == (0.33, 1024)
    assert batch.classes == honest.classes and batch.lengths is Lengths.HIDDEN and honest.unstreamed is None
