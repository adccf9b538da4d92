"""The cluster-wide view: two replicas' windows summed, and the replicas it sums named."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.support import MODEL, eventually


async def test_cluster_scope_sums_both_replicas(gateway_factory: Callable[..., str], sim_url: str) -> None:
    backends = [{"name": "sim", "url": sim_url, "models": [MODEL]}]
    a, b = gateway_factory(backends, stats_publish_s=0.2), gateway_factory(backends, stats_publish_s=0.2)
    body = {"model": MODEL, "prompt": "x", "max_tokens": 5, "ignore_eos": True}
    async with httpx.AsyncClient(timeout=30) as http:
        for url, n in ((a, 3), (b, 2)):
            for _ in range(n):
                assert (await http.post(url + "/v1/completions", json=body)).status_code == 200
        local_a = (await http.get(a + "/admin/stats")).json()
        local_b = (await http.get(b + "/admin/stats")).json()
        assert local_a["scope"] == "replica" and local_a["replicas"] == [local_a["replica"]]
        assert local_a["classes"]["short"]["requests"] == 3
        assert local_b["classes"]["short"]["requests"] == 2
        ids = sorted([local_a["replica"], local_b["replica"]])

        async def summed() -> dict:
            return (await http.get(a + "/admin/stats", params={"scope": "cluster"})).json()

        async def both_seen() -> bool:
            view = await summed()
            return view["replicas"] == ids and view["classes"]["short"]["requests"] == 5

        await eventually(both_seen)  # b's window has been published
        view = await summed()
        short = view["classes"]["short"]
        assert view["scope"] == "cluster"
        assert short["output_tokens"] == 25 and short["samples"] == 5
        assert short["queue_wait_p99_s"] is not None  # samples pooled from both
        assert sum(p["requests"] for p in view["timeline"]) == 5
        bad = await http.get(a + "/admin/stats", params={"scope": "everything"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "scope"
