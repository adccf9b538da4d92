"""Reading what pausing cost from a gateway's /metrics text."""

from __future__ import annotations

from loadtests.pause_stats import _total, stats_of

TEXT = """# HELP triage_pauses_total Running generations paused.
# TYPE triage_pauses_total counter
triage_pauses_total{triage_backend="a",triage_class="long"} 3
triage_pauses_total{triage_backend="b",triage_class="medium"} 2
triage_pauses_total_extra 100
gen_ai_client_token_usage_sum{gen_ai_token_type="input"} 1500
gen_ai_client_token_usage_sum{gen_ai_token_type="output"} 900
triage_requests_total{triage_class="short"} 10
triage_resumes_total{triage_backend="a",triage_resume_from="token_ids"} 4
triage_resumes_total{triage_backend="b",triage_resume_from="text"} 1
triage_resume_prefill_tokens_total{triage_backend="a"} 500
"""


def test_counters_are_summed_over_label_sets_and_only_that_name() -> None:
    assert _total(TEXT, "triage_pauses_total") == 5
    assert _total(TEXT, "gen_ai_client_token_usage_sum", 'gen_ai_token_type="input"') == 1500
    assert _total(TEXT, "triage_resume_prefill_tokens_total") == 500


def test_a_runs_figures_say_what_the_resumes_carried_and_what_they_cost() -> None:
    assert stats_of(TEXT) == {
        "requests": 10, "pauses": 5, "pauses_per_request": 0.5, "resumes_from_token_ids": 4, "resumes_from_text": 1,
        "resume_prefill_tokens": 500, "prompt_tokens": 1500, "resume_prefill_share": 0.25,
    }
