"""What an operator reads from a served gateway: ``/metrics`` (open), ``/admin/stats`` and
``/admin/backends`` (admin key), ``/dashboard`` (a static page)."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.admin import router
from gateway.telemetry.prometheus import CONTENT_TYPE
from tests.gateway.api.conftest import ROOT, USER, Served
from tests.support import MODEL


def test_the_operator_endpoints() -> None:
    assert {r.path for r in router.routes} == {"/metrics", "/admin/stats", "/admin/backends", "/dashboard"}


async def test_metrics_is_open_prometheus_text_counting_requests(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert (await http.post("/v1/chat/completions", json=chat, headers=USER)).status_code == 200
        resp = await http.get("/metrics")
    assert resp.headers["content-type"] == CONTENT_TYPE
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(resp.text) for s in family.samples
    }
    ok = [v for (name, labels), v in samples.items() if name == "triage_requests_total" and ("triage_outcome", "ok") in labels]
    assert sum(ok) >= 1
    limits = {dict(labels)["triage_backend"]: v for (name, labels), v in samples.items() if name == "triage_backend_limit"}
    assert limits == {"sim": 8}


@pytest.mark.parametrize("path", ["/admin/stats", "/admin/backends"])
async def test_admin_views_need_an_admin_key(served: Served, path: str) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        assert (await http.get(path)).status_code == 401
        assert (await http.get(path, headers=USER)).status_code == 403
        assert (await http.get(path, headers=ROOT)).status_code == 200


async def test_stats_for_this_replica_or_the_cluster(served: Served) -> None:
    owner = served.app.state.gateway.dispatcher.owner
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        here = (await http.get("/admin/stats", headers=ROOT)).json()
        cluster = await http.get("/admin/stats", params={"scope": "cluster"}, headers=ROOT)
        bad = await http.get("/admin/stats", params={"scope": "galaxy"}, headers=ROOT)
    assert here["scope"] == "replica" and here["replicas"] == [owner] and here["replica"] == owner
    assert set(here["classes"]) == {"short", "medium", "long"}
    assert all(entry["queue_depth"] == 0 for entry in here["classes"].values())  # nothing queued
    assert cluster.status_code == 200 and cluster.json()["scope"] == "cluster"
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "scope"


async def test_backends_and_the_dashboard(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        backends = (await http.get("/admin/backends", headers=ROOT)).json()["backends"]
        page = await http.get("/dashboard")
    assert [b["name"] for b in backends] == ["sim"]
    assert page.headers["content-type"].startswith("text/html") and b"<html" in page.content.lower()
