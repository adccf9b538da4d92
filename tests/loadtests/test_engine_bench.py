"""The real-engine comparison's summary: medians and ranges over repeats, ratios paired
within a repeat (no engine needed: these are the pure parts)."""

from __future__ import annotations

from loadtests.engines.bench import aggregate, by_load, markdown
from loadtests.engines.pairs import paired_ratios


def row(mode: str, repeat: int, ttft_p99: float, tps: float) -> dict:
    return {"mode": mode, "repeat": repeat,
            "classes": {"short": {"ttft_p99_s": ttft_p99, "ttft_p50_s": 0.1, "e2e_mean_s": 1.0},
                        "medium": {"e2e_mean_s": 2.0}, "long": {"e2e_p99_s": None}},
            "overall": {"output_tps": tps, "count": 10, "failed": 0}}


RUNS = [row("fifo", 0, 4.0, 100.0), row("short_first_preempt", 0, 1.0, 95.0),
        row("fifo", 1, 9.0, 90.0), row("short_first_preempt", 1, 1.5, 99.0),
        row("fifo", 2, 6.0, 80.0), row("short_first_preempt", 2, 3.0, 80.0)]


def test_medians_and_ranges_over_repeats() -> None:
    summary = aggregate(RUNS, ("fifo", "short_first_preempt"))
    assert summary["fifo"]["short TTFT p99 (s)"] == {"median": 6.0, "min": 4.0, "max": 9.0, "n": 3}
    assert summary["fifo"]["long E2E p99 (s)"] is None  # no long request: no figure, not a zero


def test_ratios_are_paired_within_each_repeat() -> None:
    ratios = {r["ratio"]: r for r in paired_ratios(RUNS)}
    ttft = ratios["short TTFT p99, fifo / short_first_preempt"]
    assert ttft["values"] == [4.0, 6.0, 2.0] and ttft["median"] == 4.0
    assert "output TPS, fifo / direct" not in ratios  # no direct run: no ratio


def test_the_table_lists_every_mode_with_median_and_range_one_table_per_load() -> None:
    modes = ("fifo", "short_first_preempt")
    heavier = [dict(r, load=1.0, overall={**r["overall"], "output_tps": 1.0}) for r in RUNS]
    report = {"config": {"modes": list(modes)}, "by_load": by_load([dict(r, load=0.9) for r in RUNS] + heavier, modes)}
    text = markdown(report)
    assert [p["load"] for p in report["by_load"]] == [0.9, 1.0]  # loads never mixed in one figure
    assert "| short TTFT p99 (s) | 6.00 (4.00–9.00) | 1.50 (1.00–3.00) |" in text
    assert "| requests ok | 10 (10–10) | 10 (10–10) |" in text
    assert "### load 0.9" in text and "### load 1.0" in text
    assert "| output tok/s | 1.00 (1.00–1.00) | 1.00 (1.00–1.00) |" in text.split("### load 1.0")[1]


def test_token_accounting_compares_what_clients_were_told_with_the_true_lengths() -> None:
    from loadtests.engines.bench import token_accounting

    records = [{"ok": True, "start_s": 0.5, "planned_tokens": 100, "output_tokens": 100},  # warm-up: left out
               {"ok": True, "start_s": 6.0, "planned_tokens": 300, "output_tokens": 240},
               {"ok": True, "start_s": 7.0, "planned_tokens": 100, "output_tokens": 100},
               {"ok": False, "start_s": 8.0, "planned_tokens": 500, "output_tokens": None}]
    assert token_accounting(records, 5.0) == {"planned": 400, "reported": 340, "requests_reported_short": 1,
                                              "reported_vs_planned": 0.85}


def test_engine_accounting_counts_from_vllms_own_counters() -> None:
    from loadtests.engines.under_test import engine_accounting

    labels = '{engine="0",model_name="tiny"}'
    before = {f"vllm:prompt_tokens_total{labels}": 1000.0, f"vllm:prompt_tokens_cached_total{labels}": 100.0,
              f"vllm:generation_tokens_total{labels}": 5000.0, f"vllm:prefix_cache_queries_total{labels}": 1000.0,
              f"vllm:prefix_cache_hits_total{labels}": 100.0}
    after = {f"vllm:prompt_tokens_total{labels}": 4000.0, f"vllm:prompt_tokens_cached_total{labels}": 1300.0,
             f"vllm:generation_tokens_total{labels}": 5510.0, f"vllm:prefix_cache_queries_total{labels}": 5000.0,
             f"vllm:prefix_cache_hits_total{labels}": 1100.0}
    records = [{"output_tokens": 300}, {"output_tokens": 200}, {"output_tokens": None}]  # a failure delivered none
    assert engine_accounting(before, after, records) == {
        "prompt_tokens": 3000, "prompt_cached": 1200, "prompt_computed": 1800, "hit_share": 0.25,
        "generated": 510, "delivered": 500, "generated_vs_delivered": 1.02,
    }
    rows = [dict(row("fifo", 0, 4.0, 100.0), engine={"prompt_computed": 1000}),
            dict(row("short_first_preempt", 0, 1.0, 95.0), engine={"prompt_computed": 1250})]
    ratios = {r["ratio"]: r for r in paired_ratios(rows)}
    assert ratios["engine prompt tokens computed, short_first_preempt / fifo"]["values"] == [1.25]


def test_engine_accounting_on_llamacpp_counts_what_it_counts_and_no_more() -> None:
    """llama.cpp counts the prompt tokens it evaluated and the tokens it predicted; it has no
    prefix-cache counters, so those are None, not zero."""
    from loadtests.engines.under_test import LLAMACPP_COUNTERS, engine_accounting

    before = {"llamacpp:prompt_tokens_total": 100.0, "llamacpp:tokens_predicted_total": 1000.0}
    after = {"llamacpp:prompt_tokens_total": 700.0, "llamacpp:tokens_predicted_total": 1420.0}
    assert engine_accounting(before, after, [{"output_tokens": 400}], LLAMACPP_COUNTERS) == {
        "prompt_tokens": None, "prompt_cached": None, "prompt_computed": 600, "hit_share": None,
        "generated": 420, "delivered": 400, "generated_vs_delivered": 1.05,
    }


def test_keeping_apart_moves_this_process_off_the_engines_cpus_and_refuses_to_leave_none() -> None:
    """``--engine-cpus``: what the run starts afterwards inherits the other CPUs; asking for
    every CPU (nothing left for the gateways) or one this process may not use is an error."""
    import os

    import pytest

    from loadtests.compare_options import CompareError
    from loadtests.engines.under_test import keep_apart

    mine = os.sched_getaffinity(0)
    try:
        assert keep_apart(set()) == mine and os.sched_getaffinity(0) == mine  # no flag: nothing moves
        with pytest.raises(CompareError, match="--engine-cpus"):
            keep_apart(set(mine))
        with pytest.raises(CompareError, match="--engine-cpus"):
            keep_apart({max(mine) + 64})
        if len(mine) >= 2:
            engine = {min(mine)}
            assert keep_apart(engine) == mine - engine and os.sched_getaffinity(0) == mine - engine
    finally:
        os.sched_setaffinity(0, mine)


def test_the_a_a_rows_pair_the_fifo_twin_with_fifo_within_each_repeat() -> None:
    twins = [dict(row("fifo_twin", r["repeat"], r["classes"]["short"]["ttft_p99_s"] * 1.5, 100.0))
             for r in RUNS if r["mode"] == "fifo"]
    ratios = {r["ratio"]: r for r in paired_ratios(RUNS + twins)}
    assert ratios["short TTFT p99, fifo_twin / fifo"]["values"] == [1.5, 1.5, 1.5]
    assert ratios["output TPS, fifo_twin / fifo"]["values"] == [1.0, 1.111, 1.25]


def test_an_arm_with_settings_of_its_own_is_paired_with_its_mode_and_with_fifo() -> None:
    arm = "short_first_preempt@slack_per_token_s=0.005"
    tight = [dict(row(arm, r["repeat"], r["classes"]["short"]["ttft_p99_s"] * 2, r["overall"]["output_tps"]))
             for r in RUNS if r["mode"] == "short_first_preempt"]
    ratios = {r["ratio"]: r for r in paired_ratios(RUNS + tight)}
    assert ratios[f"short TTFT p99, short_first_preempt / {arm}"]["values"] == [0.5, 0.5, 0.5]
    assert ratios[f"short TTFT p99, fifo / {arm}"]["values"] == [2.0, 3.0, 1.0]
    assert ratios[f"output TPS, {arm} / fifo"]["values"] == [0.95, 1.1, 1.0]
    assert ratios[f"short E2E mean, {arm} / short_first_preempt"]["values"] == [1.0, 1.0, 1.0]
    assert not any(r.startswith("long E2E p99") and arm in r for r in ratios)  # no long figure: no ratio
