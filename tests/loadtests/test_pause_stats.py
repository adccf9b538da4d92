"""Reading what pausing cost from a gateway's /metrics text."""

from __future__ import annotations

from loadtests.pause_stats import _total

TEXT = """# HELP triage_pauses_total Running generations paused.
# TYPE triage_pauses_total counter
triage_pauses_total{triage_backend="a",triage_class="long"} 3
triage_pauses_total{triage_backend="b",triage_class="medium"} 2
triage_pauses_total_extra 100
gen_ai_client_token_usage_sum{gen_ai_token_type="input"} 1500
gen_ai_client_token_usage_sum{gen_ai_token_type="output"} 900
"""


def test_counters_are_summed_over_label_sets_and_only_that_name() -> None:
    assert _total(TEXT, "triage_pauses_total") == 5
    assert _total(TEXT, "gen_ai_client_token_usage_sum", 'gen_ai_token_type="input"') == 1500
    assert _total(TEXT, "triage_resume_prefill_tokens_total") == 0
