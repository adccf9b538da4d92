"""Fitting a simulator profile to a real engine (``loadtests/engines/calibration.py``) and
the grid it is fitted on (``loadtests/engines/timing.py``), against the simulator over HTTP."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from loadtests.engines import calibration
from loadtests.engines.timing import Cell, measure, vocabulary_words
from simulator.profiles import VLLM_CPU_TINY, get_profile
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL

WORDS = ("the", "and", "for", "are", "has", "his", "she", "how", "her", "two", "one", "can")
TRUE = {"step_base_s": 0.004, "step_per_seq_s": 0.0001, "step_per_ctx_token_s": 5e-7,
        "prefill_per_token_s": 6e-5, "request_overhead_s": 0.005}


def _medians(p: dict[str, float]) -> dict[str, dict[str, float]]:
    """What an engine that follows the step model exactly would measure on the grid."""
    out: dict[str, dict[str, float]] = {}
    for c in calibration.PREFILL:
        ttft = p["request_overhead_s"] + p["step_base_s"] + p["step_per_seq_s"] + p["prefill_per_token_s"] * c.prompt_tokens
        out[c.name] = {"ttft_p50_ms": 1000 * ttft}
    for c in calibration.DECODE:
        n, prompt, o = c.concurrency, c.prompt_tokens, c.output_tokens
        step = p["step_base_s"] + p["step_per_seq_s"] * n + p["step_per_ctx_token_s"] * n * (prompt + o / 2)
        per_request = o * step + n * p["prefill_per_token_s"] * prompt
        out[c.name] = {"output_tps": n * o / per_request}
    return out


def test_the_fit_recovers_the_step_model_an_engine_was_measured_with() -> None:
    fitted = calibration.fit(_medians(TRUE))
    for key, value in TRUE.items():
        assert math.isclose(fitted[key], value, rel_tol=0.02), key


def test_the_fit_leaves_out_prompts_longer_than_the_workloads_range() -> None:
    med = _medians(TRUE)
    longest = max(calibration.PREFILL, key=lambda c: c.prompt_tokens)
    assert longest.prompt_tokens > calibration.FIT_PROMPT_MAX
    med[longest.name]["ttft_p50_ms"] *= 3  # a CPU's attention, superlinear past the range
    assert math.isclose(calibration.fit(med)["prefill_per_token_s"], TRUE["prefill_per_token_s"], rel_tol=0.02)


def _with_ranges(med: dict[str, dict[str, float]], scale: float) -> dict[str, dict[str, float]]:
    out = {}
    for name, figures in med.items():
        row = {}
        for key in ("ttft_p50_ms", "output_tps", "e2e_ms"):
            v = figures.get(key, 1.0) * scale
            row.update({key: v, key + "_min": v, key + "_max": v})
        out[name] = row
    return out


def test_compare_gives_each_figure_its_ratio_and_whether_it_is_within_a_quarter() -> None:
    engine = _with_ranges(_medians(TRUE), 1.0)
    rows = calibration.compare(engine, _with_ranges(_medians(TRUE), 1.2))
    assert rows and all(r["within"] and math.isclose(r["ratio"], 1.2, rel_tol=1e-3) for r in rows)
    rows = calibration.compare(engine, _with_ranges(_medians(TRUE), 1.3))
    assert not any(r["within"] for r in rows)
    assert f"0 of {len(rows)} figures within ±25%" in calibration.table(rows)
    kinds = {r["cell"]: r["figure"] for r in rows if r["cell"] == calibration.PREFILL[0].name}
    assert kinds == {calibration.PREFILL[0].name: "ttft_p50_ms"}  # a prefill cell: TTFT only


def test_vocabulary_words_are_the_three_letter_lower_case_words(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    vocab = {"<unk>": 0, "the": 1, "The": 2, "and": 3, "a1b": 4, "word": 5, "to": 6}
    path.write_text(json.dumps({"model": {"type": "WordLevel", "vocab": vocab}}))
    assert vocabulary_words(path) == ("and", "the")


async def test_a_cell_is_measured_over_http_with_the_prompt_length_it_planned() -> None:
    """Three-letter words and their spaces: the simulator counts one token each, as the tiny
    model's tokenizer does; every request but each client's first is measured."""
    cell = Cell(concurrency=2, prompt_tokens=40, output_tokens=6, rounds=3)
    with running_simulator(SimSettings(profile="fast", model=MODEL)) as url:
        result = await measure(url, MODEL, cell, WORDS)
    assert result.requests == 4 and result.prompt_tokens_counted == 40
    assert result.ttft_ms > 0 and result.e2e_ms >= result.ttft_ms and result.tpot_ms > 0 and result.output_tps > 0


def test_the_fitted_profile_is_built_in_with_the_engines_shape() -> None:
    p = get_profile("vllm-cpu-tiny")
    assert p is VLLM_CPU_TINY
    assert (p.max_num_seqs, p.block_size, p.max_num_batched_tokens, p.kv_capacity_tokens) == (8, 128, 2048, 349_440)
    assert p.scaled(2.0).request_overhead_s == pytest.approx(2 * p.request_overhead_s)


async def test_a_request_waits_the_profiles_server_time_before_the_engine_sees_it() -> None:
    """``request_overhead_s`` delays every first token by at least that long (a lower bound:
    a busy machine only adds to it)."""
    scale = 20.0  # ~0.1 s of server time, far above one step of the scaled profile's prefill
    overhead = VLLM_CPU_TINY.request_overhead_s * scale
    cell = Cell(concurrency=1, prompt_tokens=8, output_tokens=2, rounds=2)
    with running_simulator(SimSettings(profile="vllm-cpu-tiny", model=MODEL, time_scale=scale)) as url:
        result = await measure(url, MODEL, cell, WORDS)
    assert result.ttft_ms >= 1000 * overhead * 0.99
