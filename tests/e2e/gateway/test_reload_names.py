"""Aliases and engine settings are reloaded with the backends, without a restart."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway.app import create_app
from gateway.server.reload import ConfigSource
from tests.e2e.gateway.test_reload import write
from tests.support import MODEL, eventually, running_app


async def test_a_reload_applies_aliases_and_engine(tmp_path: Path, redis_url: str, prefix: str, sim_url: str) -> None:
    config = tmp_path / "triage.yaml"
    backend = {"name": "a", "url": sim_url, "models": [MODEL]}
    write(config, backends=[backend], reload_check_s=0.1)
    source = ConfigSource(config, {"redis_url": redis_url, "key_prefix": prefix})
    with running_app(create_app(source.load(), source=source)) as url:
        async with httpx.AsyncClient(timeout=30) as http:
            body = {"model": "house", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            assert (await http.post(f"{url}/v1/chat/completions", json=body)).status_code == 404
            write(config, backends=[{**backend, "engine": "sglang"}], aliases={"house": MODEL}, reload_check_s=0.1)

            async def applied() -> bool:
                return (await http.post(f"{url}/v1/chat/completions", json=body)).status_code == 200

            await eventually(applied)
            (seen,) = (await http.get(f"{url}/admin/backends")).json()["backends"]
            assert (seen["engine_profile"], seen["engine_source"]) == ("sglang", "configured")
