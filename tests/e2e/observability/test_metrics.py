"""``/metrics`` after a known workload, and ``/admin/stats`` against it and the client."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from gateway.settings import hash_key
from gateway.telemetry.stats import percentile
from tests.e2e.gateway.diagnose import all_answered
from tests.e2e.observability.conftest import MODEL, get_json, scrape, stream_chat, total

LENGTHS = [2 + i % 7 for i in range(20)]  # 20 streamed requests of known output lengths


async def _workload(base: str) -> list[dict[str, object]]:
    async with httpx.AsyncClient(timeout=120) as client:  # a request that hangs fails with what each part saw
        return await all_answered((stream_chat(client, base, n, prompt=f"p{i}") for i, n in enumerate(LENGTHS)),
                                  gateways=(base,))


async def test_metrics_count_a_known_workload(observed: Callable[..., str]) -> None:
    base = observed()
    results = await _workload(base)
    m = await scrape(base)
    out = sum(LENGTHS)
    prompt = sum(r["usage"]["prompt_tokens"] for r in results)  # type: ignore[index]

    assert total(m, "triage_output_tokens_total", triage_class="short") == out
    assert total(m, "gen_ai_client_token_usage_sum", gen_ai_token_type="output") == out
    assert total(m, "gen_ai_client_token_usage_count", gen_ai_token_type="output") == 20
    assert total(m, "gen_ai_client_token_usage_sum", gen_ai_token_type="input") == prompt
    labels = {"gen_ai_request_model": MODEL, "gen_ai_operation_name": "chat", "triage_backend": "sim"}
    assert total(m, "gen_ai_server_time_to_first_token_seconds_count", **labels) == 20
    assert total(m, "gen_ai_server_time_per_output_token_seconds_count", **labels) == 20
    assert total(m, "gen_ai_server_request_duration_seconds_count", **labels) == 20
    assert total(m, "triage_requests_total", triage_outcome="ok") == 20
    assert total(m, "triage_scheduler_outcomes_total", triage_outcome="admitted") == 20
    assert total(m, "triage_queue_wait_seconds_count", triage_tier="interactive") == 20
    # histograms are cumulative and end at +Inf with the count
    inf = total(m, "gen_ai_server_time_to_first_token_seconds_bucket", le="+Inf")
    assert inf == 20

    # observed state: the backend, its limit and health, an empty queue
    assert total(m, "triage_backend_limit", triage_backend="sim") == 16
    assert total(m, "triage_backend_long_cap", triage_backend="sim") == 16
    assert total(m, "triage_backend_borrowed", triage_backend="sim") == 0
    assert "triage_backend_in_flight" in m
    assert total(m, "triage_backend_health", triage_backend="sim", triage_state="up") == 1
    assert total(m, "triage_backend_health", triage_backend="sim", triage_state="down") == 0
    assert total(m, "triage_queue_depth", triage_pool="default") == 0


async def test_predictor_error_and_rank_accuracy(observed: Callable[..., str]) -> None:
    # replies that end on their own (no ignore_eos, a cap far above): first from the shipped
    # warm start (the learned model on day one)...
    prompts = [f"question {i}" for i in range(8)]
    base = observed()
    async with httpx.AsyncClient(timeout=120) as client:
        lengths = [
            (await stream_chat(client, base, 4000, prompt=p, ignore_eos=False))["usage"]["completion_tokens"]
            for p in prompts
        ]
    m = await scrape(base)
    assert total(m, "triage_predictor_error_ratio_count", triage_prediction_source="learned") == 8
    assert (await get_json(base, "/admin/stats"))["predictor"]["pairs"] == 8

    # ...then on a fresh replica, with each true length sent as the hint: exact, perfectly ranked
    base = observed()
    async with httpx.AsyncClient(timeout=120) as client:
        for p, n in zip(prompts, lengths, strict=True):
            headers = {"x-triage-expected-tokens": str(n)}
            await stream_chat(client, base, 4000, prompt=p, ignore_eos=False, headers=headers)
    m = await scrape(base)
    hinted = {"triage_prediction_source": "hint"}
    assert total(m, "triage_predictor_error_ratio_count", **hinted) == 8
    assert total(m, "triage_predictor_error_ratio_bucket", le="0.8409", **hinted) == 0
    assert total(m, "triage_predictor_error_ratio_bucket", le="1.1892", **hinted) == 8
    if len(set(lengths)) > 1:
        assert total(m, "triage_predictor_kendall_tau") == 1.0


async def test_admin_stats_agree_with_metrics_and_client(observed: Callable[..., str]) -> None:
    base = observed()
    results = await _workload(base)
    stats = await get_json(base, "/admin/stats")
    short = stats["classes"]["short"]
    assert short["requests"] == 20 and short["output_tokens"] == sum(LENGTHS)
    assert short["rps"] == 20 / stats["window_s"]
    assert short["output_tps"] == sum(LENGTHS) / stats["window_s"]
    assert short["rejections"] == 0 and short["queue_depth"] == 0

    # each percentile lies in the bucket of the exported histogram that holds that rank
    m = await scrape(base)
    buckets = sorted(
        (float(lab["le"]), v) for lab, v in m["gen_ai_server_time_to_first_token_seconds_bucket"]
    )
    for q in (50, 90, 99):
        value = short[f"ttft_p{q}_s"]
        rank = -(-q * 20 // 100)
        upper_index = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
        lower = buckets[upper_index - 1][0] if upper_index else 0.0
        assert lower < value <= buckets[upper_index][0], (q, value, buckets)

    # the client's TTFT holds the gateway's (sent earlier, received later), so every
    # client percentile is at least the gateway's
    client_ttft = [r["ttft_s"] for r in results]
    for q in (50, 90, 99):
        assert percentile(client_ttft, q) >= short[f"ttft_p{q}_s"]  # type: ignore[arg-type, operator]


def test_admin_endpoints_need_an_admin_key(observed: Callable[..., str]) -> None:
    keys = [
        {"sha256": hash_key("admin-key"), "admin": True},
        {"sha256": hash_key("user-key"), "tenant": "t1"},
    ]
    base = observed(api_keys=keys)
    for path in ("/admin/stats", "/admin/backends"):
        assert httpx.get(f"{base}{path}").status_code == 401
        assert httpx.get(f"{base}{path}", headers={"authorization": "Bearer user-key"}).status_code == 403
        assert httpx.get(f"{base}{path}", headers={"authorization": "Bearer admin-key"}).status_code == 200
    view = httpx.get(f"{base}/admin/backends", headers={"authorization": "Bearer admin-key"}).json()
    assert [b["name"] for b in view["backends"]] == ["sim"]
    assert view["backends"][0]["limit"] == 16
    assert httpx.get(f"{base}/metrics").status_code == 200  # scraped without a key
