"""Planning requests: seeded, honest to the workload, and usable without the data folder."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from loadtests.client import Target, request_body, request_headers
from loadtests.datasets import PromptCatalog, synthetic_text
from loadtests.requests import RequestFactory
from loadtests.traces import TraceRow
from loadtests.workload import Api, Tenant, load_workload


def test_same_seed_same_requests() -> None:
    w = load_workload("synthetic")
    a = [RequestFactory(w, PromptCatalog(None), 5).next(i) for i in range(30)]
    b = [RequestFactory(w, PromptCatalog(None), 5).next(i) for i in range(30)]
    assert a == b


def test_class_shares_and_output_ranges() -> None:
    w = load_workload("synthetic")
    f = RequestFactory(w, PromptCatalog(None), 1)
    reqs = [f.next(i) for i in range(2000)]
    counts = Counter(r.cls for r in reqs)
    assert 0.75 < counts["short"] / 2000 < 0.85
    assert all(4 <= r.max_tokens <= 400 for r in reqs if r.cls == "short")
    assert all(300 <= r.max_tokens <= 2500 for r in reqs if r.cls == "long")


def test_without_data_folder_the_shipped_sample_is_used() -> None:
    catalog = PromptCatalog(Path("/nonexistent"))
    f = RequestFactory(load_workload("mixed"), catalog, 0)
    reqs = [f.next(i) for i in range(200)]
    short = [r for r in reqs if r.cls == "short"]
    assert short and all(16 <= r.max_tokens <= 400 for r in short)
    assert catalog.origin["gsm8k"].startswith("shipped sample")
    assert len({r.prompt for r in short}) > 20  # real, varied prompts


def test_dataset_lengths_are_the_real_reply_lengths() -> None:
    catalog = PromptCatalog(None)
    by_prompt = {row.text: row.response_tokens for row in catalog.sample()}
    f = RequestFactory(load_workload("mixed"), catalog, 3)
    for r in (f.next(i) for i in range(100)):
        if r.cls == "short":
            assert by_prompt[r.prompt] == r.max_tokens


def test_trace_rows_keep_their_lengths_and_get_a_class() -> None:
    w = load_workload("azure-conv")
    f = RequestFactory(w, PromptCatalog(None), 0)
    short = f.from_trace(0, TraceRow(0.0, 400, 100), 0.0)
    long = f.from_trace(1, TraceRow(1.0, 50_000, 900), 1.0)
    assert (short.cls, short.max_tokens, short.prompt_tokens) == ("short", 100, 400)
    assert (long.cls, long.max_tokens) == ("long", 900)
    assert long.prompt_tokens == 16_000  # cut to the workload's max_prompt_tokens
    assert len(short.prompt) == 1600  # four characters a token, as the simulator counts


def test_body_and_headers() -> None:
    w = load_workload("synthetic")
    req = RequestFactory(w, PromptCatalog(None), 0).next(0)
    body = request_body(req, Target(("http://127.0.0.1:1",), "m", Api.CHAT, True))
    assert body["max_tokens"] == req.max_tokens and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"][0]["content"] == req.prompt
    plain = request_body(req, Target(("http://127.0.0.1:1",), "m", Api.COMPLETIONS, False))
    assert "stream_options" not in plain and plain["prompt"] == req.prompt
    headers = request_headers(req)
    assert headers["x-triage-oracle-tokens"] == str(req.max_tokens)
    assert "authorization" not in headers


def test_tenants_and_tiers_are_sent() -> None:
    from dataclasses import replace

    w = load_workload("synthetic")
    w = replace(w, tenants=(Tenant("key-a", 1.0), Tenant("key-b", 1.0)),
                classes=tuple(replace(c, tier="batch") for c in w.classes))
    f = RequestFactory(w, PromptCatalog(None), 0)
    reqs = [f.next(i) for i in range(50)]
    assert {r.api_key for r in reqs} == {"key-a", "key-b"}
    h = request_headers(reqs[0])
    assert h["authorization"].startswith("Bearer key-") and h["x-triage-priority"] == "batch"


def test_synthetic_text_length() -> None:
    assert len(synthetic_text(100, random.Random(0))) == 400
