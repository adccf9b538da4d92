"""``triage serve``'s pieces that run before the server: the Redis reachability check,
the banner, and a worker process's app."""

from __future__ import annotations

import gc

import httpx
import pytest
from fastapi import FastAPI

from gateway.serve import _banner, _check_redis, worker_app
from gateway.server.embedded import free_port
from gateway.settings import ConfigError, Settings
from tests.support import running_app


def test_an_unreachable_redis_is_a_config_error_naming_it() -> None:
    port = free_port()
    with pytest.raises(ConfigError) as caught:
        _check_redis(f"redis://127.0.0.1:{port}/0")
    assert "redis_url: cannot reach" in str(caught.value) and str(port) in str(caught.value)


def test_a_reachable_redis_passes(redis_url: str) -> None:
    _check_redis(redis_url)


def test_the_banner_shows_where_to_send_the_first_request() -> None:
    settings = Settings.model_validate({
        "host": "127.0.0.1", "port": 8123, "backends": [{"name": "b", "url": "http://x", "models": ["llama-3"]}],
    })
    banner = _banner(settings, ["embedded thing at somewhere"])
    assert "Triage gateway on http://127.0.0.1:8123" in banner
    assert "  embedded thing at somewhere" in banner
    assert '"model": "llama-3"' in banner and "base_url='http://127.0.0.1:8123/v1'" in banner


def test_a_worker_builds_its_own_app_from_the_settings(redis_url: str) -> None:
    settings = Settings.model_validate({"redis_url": redis_url, "backends": []})
    app = worker_app(settings.model_dump_json())
    assert isinstance(app, FastAPI)
    frozen = gc.get_freeze_count()
    try:
        with running_app(app) as url:  # a replica of its own: it starts, and answers
            assert httpx.get(f"{url}/health", timeout=10, trust_env=False).json() == {"status": "ok"}
            assert app.state.gateway.settings == settings
            assert gc.get_freeze_count() > frozen  # what its startup built is out of the collector's way
    finally:
        gc.unfreeze()  # this process builds many apps
