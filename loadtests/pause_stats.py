"""What pausing cost in one gateway run, read from the gateway's own ``/metrics``.

``pauses`` (triage_pauses_total), the resumes by what they carried (triage_resumes_total:
the token ids, an exact resume, or the text so far), the prompt tokens backends read
again to resume (triage_resume_prefill_tokens_total), and the prompt tokens of the requests themselves
(gen_ai_client_token_usage, input), so a report can give pauses per request and the
extra prefill as a share of all prefill. Counted over everything the gateway served in
the run (warm-up included); the prefix cache makes the computed share smaller still.
"""

from __future__ import annotations

import httpx


def _total(text: str, name: str, label: str = "") -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {") and label in line:
            try:
                total += float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return total


def pause_stats(url: str) -> dict[str, float] | None:
    """None when the gateway could not be read."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=10, trust_env=False).text
    except httpx.HTTPError:
        return None
    return stats_of(text)


def stats_of(text: str) -> dict[str, float]:
    """The figures of one gateway's ``/metrics`` text."""
    requests = _total(text, "triage_requests_total")
    pauses = _total(text, "triage_pauses_total")
    resumed = _total(text, "triage_resume_prefill_tokens_total")
    prompt = _total(text, "gen_ai_client_token_usage_sum", 'gen_ai_token_type="input"')
    return {
        "requests": requests,
        "pauses": pauses,
        "pauses_per_request": round(pauses / requests, 4) if requests else 0.0,
        "resumes_from_token_ids": _total(text, "triage_resumes_total", 'triage_resume_from="token_ids"'),
        "resumes_from_text": _total(text, "triage_resumes_total", 'triage_resume_from="text"'),
        "resume_prefill_tokens": resumed,
        "prompt_tokens": prompt,
        "resume_prefill_share": round(resumed / (prompt + resumed), 4) if prompt + resumed else 0.0,
    }
