"""``/ready`` when every backend is down: by default the replica stays ready (a load
balancer would otherwise drop every replica at once) and answers requests 503 itself;
``ready_requires_backend`` makes it unready instead."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from gateway.server.embedded import free_port
from tests.support import MODEL, eventually

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def dead_backend() -> dict[str, object]:
    return {"name": "dead", "url": f"http://127.0.0.1:{free_port()}", "models": [MODEL], "adaptive": False}


async def _down(http: httpx.AsyncClient) -> bool:
    return (await http.get("/ready")).json()["backends_down"] == ["dead"]


async def test_ready_stays_ready_with_every_backend_down(gateway_factory: Callable[..., str]) -> None:
    gw = gateway_factory([dead_backend()], probe_interval_s=0.05)
    async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
        await eventually(lambda: _down(http))
        ready = await http.get("/ready")
        assert ready.status_code == 200
        assert ready.json() == {
            "ready": True, "redis": True, "backends": False, "draining": False, "backends_down": ["dead"],
        }
        resp = await http.post("/v1/chat/completions", json=CHAT)
        assert resp.status_code == 503
        error = resp.json()["error"]
        assert error["code"] == "no_backend" and error["type"] == "service_unavailable"
        assert MODEL in error["message"] and int(resp.headers["retry-after"]) >= 1
        backends = (await http.get("/admin/backends")).json()["backends"]
        assert [(b["name"], b["state"]) for b in backends] == [("dead", "down")]


async def test_ready_requires_backend_when_configured(gateway_factory: Callable[..., str], sim_url: str) -> None:
    gw = gateway_factory([dead_backend()], probe_interval_s=0.05, ready_requires_backend=True)
    async with httpx.AsyncClient(base_url=gw, timeout=30) as http:
        await eventually(lambda: _down(http))
        ready = await http.get("/ready")
        assert ready.status_code == 503 and ready.json()["ready"] is False
    healthy = gateway_factory(
        [{"name": "sim", "url": sim_url, "models": [MODEL]}], ready_requires_backend=True
    )
    async with httpx.AsyncClient(base_url=healthy, timeout=30) as http:
        assert (await http.get("/ready")).status_code == 200
