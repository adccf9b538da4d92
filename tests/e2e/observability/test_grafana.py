"""The Grafana dashboard: valid JSON, model/backend/instance variables that its panels use,
and every query (variables' too) names metrics and labels that /metrics really exports."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import httpx

from tests.e2e.observability.conftest import scrape, stream_chat
from tests.support import ROOT

DASHBOARD = ROOT / "deploy/grafana/dashboards/triage.json"
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())  # valid JSON, or this fails


def panel_queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def variable_queries() -> dict[str, str]:
    return {v["name"]: v["query"]["query"] for v in dashboard()["templating"]["list"]}


def test_the_variables_exist_and_every_gateway_query_uses_them() -> None:
    variables = variable_queries()
    assert set(variables) == {"model", "backend", "instance"}
    for v in dashboard()["templating"]["list"]:
        assert v["type"] == "query" and v["includeAll"] and v["multi"] and v["allValue"] == ".*"
    queries = panel_queries()
    for expr in queries:
        for name, matchers in SELECTOR.findall(expr):
            if 'job="gateway"' in matchers:
                assert 'instance=~"$instance"' in matchers, expr
            if "gen_ai_request_model" in _labels_of(name) and 'job="gateway"' in matchers:
                assert 'gen_ai_request_model=~"$model"' in matchers, expr
            if "triage_backend" in _labels_of(name) and 'job="gateway"' in matchers:
                assert 'triage_backend=~"$backend"' in matchers, expr
    for name in variables:
        assert any(f"${name}" in expr for expr in queries), name


# which of the dashboard's gateway metrics carry the model and backend labels (metrics.py)
_GENAI = ("gen_ai_server_", "triage_requests_total", "triage_output_tokens_total")


def _labels_of(metric: str) -> set[str]:
    if metric.startswith(_GENAI):
        return {"gen_ai_request_model", "triage_backend"}
    if metric.startswith("triage_backend_"):
        return {"triage_backend"}
    if metric.startswith("triage_predictor_error_ratio"):
        return {"gen_ai_request_model"}
    return set()


async def test_every_query_names_exported_metrics_and_labels(observed: Callable[..., str]) -> None:
    base = observed()
    async with httpx.AsyncClient(timeout=120) as client:
        for i, hint in enumerate((5, 50, 20)):
            await stream_chat(client, base, 300, prompt=f"g{i}", ignore_eos=False,
                              headers={"x-triage-expected-tokens": str(hint)})
    samples = await scrape(base)
    labels: dict[str, set[str]] = {}
    for name, values in samples.items():
        for found, _ in values:
            labels.setdefault(name, set()).update(found)
    exprs = panel_queries() + list(variable_queries().values())
    for expr in exprs:
        for name, matchers in SELECTOR.findall(expr):
            if 'job="backends"' in matchers:
                continue  # the engines' own metrics (test_deploy checks them against the simulator)
            assert name in samples, f"{name} is not exported (query: {expr})"
            used = {m.split("=")[0].rstrip("!~") for m in matchers.split(",") if m}
            used -= {"job", "instance"}  # added by Prometheus when it scrapes
            assert used <= labels[name], (name, used - labels[name])
    for name, query in variable_queries().items():
        label = query.rsplit(",", 1)[1].strip(" )")
        if label != "instance":
            metric = SELECTOR.search(query).group(1)  # type: ignore[union-attr]
            assert label in labels[metric], (name, query)
