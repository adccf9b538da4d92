"""What a worker process of ``triage serve --workers N`` is handed: its config's source, as
JSON across the process boundary, and the logging a single process sets up."""

from __future__ import annotations

import logging.config
from pathlib import Path

from gateway.server.reload import ConfigSource
from gateway.server.workers import log_config, source_json, source_of
from gateway.settings import BackendSettings


def test_the_source_crosses_to_a_worker_whole() -> None:
    """The flags ``serve`` filled in (a simulated backend, an embedded Redis's URL) reach the
    worker as the settings they were, so its reload reads the config as the parent did."""
    backend = BackendSettings(name="sim", url="http://127.0.0.1:9", models=["m"], max_concurrency=64)
    source = ConfigSource(Path("/etc/triage.yaml"), {"port": 8000, "redis_url": "redis://x:1/0", "backends": [backend]})
    back = source_of(source_json(source))
    assert back is not None and back.path == source.path
    assert back.overrides["redis_url"] == "redis://x:1/0" and back.overrides["port"] == 8000
    assert [BackendSettings.model_validate(b) for b in back.overrides["backends"]] == [backend]
    assert source_of(source_json(ConfigSource(None, {}))) == ConfigSource(None, {})
    assert source_json(None) is None and source_of(None) is None


def test_a_worker_logs_as_a_single_process_does() -> None:
    config = log_config()
    assert config["root"]["level"] == "INFO" and config["loggers"]["httpx"]["level"] == "WARNING"
    assert {"uvicorn", "uvicorn.error", "uvicorn.access"} <= set(config["loggers"])  # uvicorn's own kept
    root = logging.getLogger()
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers))
             for name in ("", "httpx", "httpcore", "uvicorn", "uvicorn.error", "uvicorn.access")}
    logging.config.dictConfig(config)  # a configuration logging accepts
    try:
        assert logging.getLogger("triage.drain").getEffectiveLevel() == logging.INFO
        assert logging.getLogger("httpx").getEffectiveLevel() == logging.WARNING
        assert root.handlers and root.handlers[0].formatter is not None
        assert root.handlers[0].formatter._fmt == "%(levelname)s %(name)s: %(message)s"
    finally:  # this process's logging as it was
        for name, (level, handlers) in saved.items():
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.handlers[:] = handlers
