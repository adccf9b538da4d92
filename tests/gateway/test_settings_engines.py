"""The engine and alias settings: parsed once, bad values named in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app import backend_configs
from gateway.settings import ConfigError, load_settings


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "triage.yaml"
    path.write_text(text)
    return load_settings(path)


@pytest.mark.parametrize(("text", "names"), [
    ("backends:\n  - {name: a, url: 'http://h:1', engine: vllmx}\n", "backends.0.engine"),
    ("backends:\n  - {name: a, url: 'http://h:1', engine_priority_order: up}\n", "backends.0.engine_priority_order"),
    ("aliases: {small: ''}\n", "aliases"),
    ("aliases: {small: small}\n", "aliases.small"),
])
def test_bad_values_are_named(tmp_path: Path, text: str, names: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert names in str(err.value)


def test_a_configured_max_concurrency_is_known_as_such(tmp_path: Path) -> None:
    settings = load_settings(None, backends=[
        {"name": "a", "url": "http://h:1", "engine": "ollama"},
        {"name": "b", "url": "http://h:2", "engine": "ollama", "max_concurrency": 32},
    ], aliases={"llama3.2": "llama3.2:latest"})
    a, b = backend_configs(settings)
    assert (a.engine, a.concurrency_set, b.concurrency_set) == ("ollama", False, True)
    assert settings.aliases == {"llama3.2": "llama3.2:latest"}
