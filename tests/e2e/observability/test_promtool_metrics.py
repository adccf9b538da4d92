"""``promtool check metrics`` on a live ``/metrics`` page after real traffic: every sample
has its family's help text and type; names follow Prometheus's conventions."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Callable

import httpx
import pytest

from tests.e2e.observability.conftest import stream_chat

PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)")
async def test_live_scrape_passes_promtool(observed: Callable[..., str]) -> None:
    base = observed()
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(3):
            await stream_chat(client, base, 3, prompt=f"m{i}")
        text = (await client.get(f"{base}/metrics")).text
    assert "triage_requests_total" in text
    assert PROMTOOL is not None
    result = await asyncio.to_thread(
        subprocess.run, [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    # promtool prints lint problems and exits 1 on any (3 for lint only in newer releases)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr
