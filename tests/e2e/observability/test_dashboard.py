"""The dashboard in a real headless browser: it loads, shows what /admin/stats says, no errors."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.e2e.gateway.diagnose import all_answered
from tests.e2e.observability.browser import find_chromium, open_page
from tests.e2e.observability.conftest import get_json, stream_chat
from tests.support import eventually


@pytest.fixture(scope="session")
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run does)")
    return binary


async def test_dashboard_shows_the_stats(observed: Callable[..., str], chromium: str) -> None:
    base = observed()
    async with httpx.AsyncClient(timeout=120) as client:  # a request that hangs fails with what each part saw
        await all_answered((stream_chat(client, base, 3 + i % 5, prompt=f"d{i}") for i in range(12)),
                           gateways=(base,))
    stats = await get_json(base, "/admin/stats")
    backends = (await get_json(base, "/admin/backends"))["backends"]

    async with open_page(chromium, f"{base}/dashboard") as page:
        await eventually(lambda: _ready(page), 30)
        cells = await page.evaluate(
            "[...document.querySelectorAll('td[data-metric]')]"
            ".map(td => [td.dataset.class, td.dataset.metric, td.dataset.value, td.textContent])"
        )
        charts = await page.evaluate("[...document.querySelectorAll('svg')].map(s => s.querySelectorAll('polyline').length)")
        replica = await page.evaluate("document.getElementById('replica').textContent")
        png = await page.screenshot()
        assert not page.errors, page.errors

    assert replica == stats["replica"]
    shown = {(c, m): (v, text) for c, m, v, text in cells}
    short = stats["classes"]["short"]
    for metric in ("rps", "output_tps", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "queue_depth", "rejections"):
        value, _ = shown[("short", metric)]
        assert float(value) == pytest.approx(short[metric]), metric
    assert shown[("short", "ttft_p99_s")][1] == f"{short['ttft_p99_s'] * 1000:.1f} ms"
    assert shown[("short", "rps")][1] == f"{short['rps']:.2f}"
    assert float(shown[("sim", "limit")][0]) == backends[0]["limit"]
    assert sum(charts) >= 3  # queue depth and TTFT lines per class, RPS and TPS lines
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


async def _ready(page: object) -> bool:
    # the page counts its successful refreshes; before it loads, there is no body or no count
    expression = "document.body ? Number(document.body.dataset.ready || 0) : 0"
    return await page.evaluate(expression) >= 1  # type: ignore[attr-defined]


async def test_dashboard_sums_the_cluster_and_names_its_replicas(observed: Callable[..., str], chromium: str) -> None:
    a, b = observed(stats_publish_s=0.2), observed(stats_publish_s=0.2)
    async with httpx.AsyncClient(timeout=120) as client:
        for base in (a, a, b):
            await stream_chat(client, base, 3)
    ids = sorted([(await get_json(a, "/admin/stats"))["replica"], (await get_json(b, "/admin/stats"))["replica"]])

    async def both() -> bool:  # b's window has been published since its request ended
        view = await get_json(a, "/admin/stats?scope=cluster")
        return view["replicas"] == ids and view["classes"]["short"]["requests"] == 3

    await eventually(both)
    async with open_page(chromium, f"{a}/dashboard?scope=cluster") as page:
        await eventually(lambda: _ready(page), 30)
        summing = await page.evaluate("document.getElementById('summing').dataset.replicas")
        title = await page.evaluate("document.getElementById('classesTitle').textContent")
        requests = await page.evaluate(
            "document.querySelector('td[data-class=short][data-metric=rps]').dataset.value"
        )
        assert not page.errors, page.errors
    assert summing == ",".join(ids)
    assert "all replicas" in title
    assert float(requests) == pytest.approx(3 / 60)
