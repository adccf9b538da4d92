"""``Reloader``: a config file read again on SIGHUP at once, or when its bytes change and
two reads in a row agree; a config that does not load keeps the running one."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.server.reload import ConfigSource, Reloader, restart_only
from gateway.settings import Settings


class Applied:
    def __init__(self) -> None:
        self.settings: list[Settings] = []

    async def __call__(self, new: Settings) -> list[str]:
        self.settings.append(new)
        return [f"{len(new.api_keys)} keys"]


KEY_A = "api_keys: [{sha256: " + "a" * 64 + ", tenant: a}]\n"
KEY_B = "api_keys: [{sha256: " + "b" * 64 + ", tenant: b}]\n"


def write(path: Path, text: str) -> None:
    path.write_text(text)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "triage.yaml"
    path.write_text(KEY_A)
    return path


def reloader(config: Path, applied: Applied) -> Reloader:
    source = ConfigSource(config, {"redis_url": "redis://127.0.0.1:1"})
    return Reloader(source, check_s=60, apply=applied, current=source.load())


async def test_a_changed_file_is_applied_once_two_reads_agree(config: Path) -> None:
    applied = Applied()
    r = reloader(config, applied)
    await r._check()
    assert applied.settings == []  # unchanged: nothing to do

    write(config, KEY_B)
    await r._check()
    assert applied.settings == []  # seen once: it may be half-written
    await r._check()
    (new,) = applied.settings
    assert [k.tenant for k in new.api_keys] == ["b"] and r.reloads == 1
    await r._check()
    assert r.reloads == 1  # applied once


async def test_sighup_applies_at_once(config: Path) -> None:
    applied = Applied()
    r = reloader(config, applied)
    write(config, KEY_B)
    r.trigger()
    await r._check()
    assert [k.tenant for s in applied.settings for k in s.api_keys] == ["b"]


async def test_a_config_that_does_not_load_keeps_the_running_one(config: Path) -> None:
    applied = Applied()
    r = reloader(config, applied)
    write(config, "policy: no-such-policy\n")
    assert await r.reload() is False
    assert applied.settings == [] and r.failures == 1 and r.reloads == 0


def test_settings_that_need_a_restart_are_named() -> None:
    old = Settings.model_validate({"policy": "fifo", "port": 8000})
    new = Settings.model_validate({"policy": "short_first", "port": 9000, "api_keys": [{"sha256": "c" * 64}]})
    assert restart_only(old, new) == ["policy", "port"]  # keys reload; these do not


def test_a_source_without_a_file_has_no_digest(tmp_path: Path) -> None:
    assert ConfigSource(None, {}).digest() is None
    assert ConfigSource(tmp_path / "gone.yaml", {}).digest() is None  # being replaced: look again later
