"""Hot reload: read the config again on SIGHUP or when the file changes, and apply what
can change without a restart — backends, the config file's keys, quotas.

The file is read every ``reload_check_s`` (its bytes, not its time stamp: a Kubernetes
ConfigMap is swapped through a symlink), and applied once two reads in a row agree (a
file being written is not applied half-way); SIGHUP applies it at once. A config that does not load
(``ConfigError``) is reported and the running one kept. Requests in flight are not
touched: a removed backend takes no new work and finishes what it runs; a removed key
is refused from the next request on. Settings that need a restart are named in the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.settings import ConfigError, Settings, load_settings
from scheduler import tasks

log = logging.getLogger("triage.reload")

# what a reload applies; every other setting needs a restart
RELOADABLE = frozenset({"backends", "api_keys", "default_quota", "tenant_quotas", "aliases"})


@dataclass(frozen=True, slots=True)
class ConfigSource:
    """Where the settings came from, to read them the same way again."""

    path: Path | None
    overrides: dict[str, Any]  # the command line's flags (and what ``serve`` filled in)

    def load(self) -> Settings:
        return load_settings(self.path, **self.overrides)

    def digest(self) -> str | None:
        if self.path is None:
            return None
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None  # being replaced: look again next time


def restart_only(old: Settings, new: Settings) -> list[str]:
    """The settings that differ but are not applied without a restart."""
    return sorted(
        name for name in Settings.model_fields
        if name not in RELOADABLE and name != "redis_url" and getattr(old, name) != getattr(new, name)
    )


class Reloader:
    def __init__(
        self, source: ConfigSource, check_s: float, apply: Callable[[Settings], Awaitable[list[str]]],
        current: Settings,
    ) -> None:
        self._source = source
        self._apply = apply
        self._current = current
        self._digest = source.digest()
        self._pending: str | None = None  # a new content seen once, not yet applied
        self._asked = False  # SIGHUP since the last check
        # no file to watch (or no interval): only SIGHUP reloads
        every_s = check_s if check_s > 0 and source.path is not None else None
        self._checks = tasks.Periodic(every_s, self._check, "config reload", log=log)
        self._signal = False
        self.reloads = 0  # applied so far
        self.failures = 0  # configs that did not load (the running one stayed)

    def trigger(self) -> None:
        """Reload now (SIGHUP)."""
        self._asked = True
        self._checks.wake()

    async def start(self) -> None:
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGHUP"):
            try:
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.trigger)
                self._signal = True
            except (NotImplementedError, RuntimeError):
                pass
        self._checks.start()

    async def stop(self) -> None:
        if self._signal:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        await self._checks.stop()

    async def _check(self) -> None:
        """One look at the file, or a reload asked for by SIGHUP."""
        asked, self._asked = self._asked, False
        digest = self._source.digest()
        if asked:
            self._digest = self._pending = digest
            await self.reload()
        elif digest is not None and digest != self._digest:
            # a file being written may be read half-way: apply what stays the same
            # over two checks in a row
            if digest == self._pending:
                self._digest = digest
                await self.reload()
            self._pending = digest

    async def reload(self) -> bool:
        try:
            new = self._source.load()
        except ConfigError as exc:
            log.error("config reload failed, the running config stays: %s", exc)
            self.failures += 1
            return False
        changes = await self._apply(new)
        ignored = restart_only(self._current, new)
        self._current = new
        self.reloads += 1
        log.info("config reloaded: %s", "; ".join(changes) or "no change to backends, keys or quotas")
        if ignored:
            log.warning("config reload: %s change only with a restart", ", ".join(ignored))
        return True
