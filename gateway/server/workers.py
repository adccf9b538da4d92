"""``triage serve --workers N``: N processes on one listening socket, each a replica of its
own (owner id, inbox, heartbeat), with the drain, the reload and the logs of a single process.

    supervisor (uvicorn's, bound to the socket)
      ├─ SIGTERM / SIGINT ─► SIGTERM to every worker: each drains (gateway/server/drain.py)
      │                      and exits; the supervisor exits once they all have
      ├─ a second one     ─► SIGTERM again: each worker ends its running requests now
      ├─ SIGHUP           ─► SIGHUP to every worker: each reloads its config
      │                      (gateway/server/reload.py; uvicorn's own answer, restarting
      │                      the workers with the settings they started with, would drop
      │                      the running requests and read nothing new)
      └─ a worker that dies is started again

A worker ignores SIGINT: a Ctrl-C reaches the whole process group, and the supervisor
turns it into the SIGTERM above (taken as a second signal, the SIGINT would cut the
running requests instead of draining them).

Each worker builds its app itself (``gateway.serve.worker_app``, uvicorn's factory: only
the settings, the config file's path and the flags cross the process boundary, as JSON)
and keeps its drain here (``keep_drain``), where its server finds it when a signal comes.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import signal
from pathlib import Path
from socket import socket
from types import FrameType
from typing import Any

from pydantic import BaseModel
from uvicorn import Config
from uvicorn.config import LOGGING_CONFIG
from uvicorn.supervisors import multiprocess

from gateway.server.drain import Drain, draining_server, quiet_stop_server
from gateway.server.reload import ConfigSource

_own_drain: Drain | None = None  # this worker process's app's


def keep_drain(drain: Drain) -> None:
    """The drain of the app this worker process serves (set once its app is built)."""
    global _own_drain
    _own_drain = drain


def source_json(source: ConfigSource | None) -> str | None:
    """``source`` as JSON for the workers (settings objects among the flags as plain data)."""
    if source is None:
        return None

    def plain(value: Any) -> Any:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return json.dumps({"path": str(source.path) if source.path else None, "overrides": plain(source.overrides)})


def source_of(doc: str | None) -> ConfigSource | None:
    """The ``ConfigSource`` that ``source_json`` wrote."""
    if doc is None:
        return None
    data = json.loads(doc)
    return ConfigSource(Path(data["path"]) if data["path"] else None, data["overrides"])


def log_config(quiet: tuple[str, ...] = ("httpx", "httpcore")) -> dict[str, Any]:
    """uvicorn's logging, applied in each worker, plus what ``triage`` sets up in a single
    process (triage/cli.py): the gateway's own loggers at INFO in its format, ``quiet`` ones
    (its ``QUIET_LOGGERS``) at WARNING."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["triage"] = {"format": "%(levelname)s %(name)s: %(message)s"}
    config["handlers"]["triage"] = {"class": "logging.StreamHandler", "formatter": "triage", "stream": "ext://sys.stderr"}
    config["root"] = {"level": "INFO", "handlers": ["triage"]}
    for name in quiet:
        config["loggers"][name] = {"level": "WARNING"}
    return config


class WorkerProcess(multiprocess.Process):
    """A worker whose server drains on SIGTERM, as ``triage serve`` does alone."""

    @property
    def server(self) -> Any:
        if self._server is None:
            self._server = draining_server(quiet_stop_server(), self.config, lambda: _own_drain, ignore_sigint=True)
        return self._server

    def always_pong(self) -> None:
        try:
            super().always_pong()
        except (EOFError, OSError):
            pass  # the supervisor closed its end of the pipe: it is stopping this worker


class Supervisor(multiprocess.Multiprocess):
    """uvicorn's supervisor, passing SIGTERM, SIGINT and SIGHUP on to the workers."""

    def __init__(self, config: Config, sockets: list[socket]) -> None:
        super().__init__(config, sockets)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_stop)

    def run(self) -> None:
        # every worker this supervisor starts (at first, and again when one dies) is ours:
        # uvicorn makes them by the module's name ``Process``
        multiprocess.Process = WorkerProcess  # type: ignore[misc]
        super().run()

    def _on_stop(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit.is_set():  # a second signal: the workers already drain; hurry them
            self._tell(signal.SIGTERM)
        else:
            self.signal_queue.append(sig)  # the first: uvicorn's loop stops and SIGTERMs each worker

    def handle_hup(self) -> None:
        logging.getLogger("triage.workers").info("SIGHUP: the workers reload their config")
        self._tell(signal.SIGHUP)

    def _tell(self, sig: int) -> None:
        for process in self.processes:
            if process.pid is not None and process.exitcode is None:
                try:
                    os.kill(process.pid, sig)
                except ProcessLookupError:
                    pass
