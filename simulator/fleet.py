"""Several simulated backends in one process: ``python -m simulator.fleet --ports 4001,4002 ...``.

A benchmark with dozens of backends on a small machine cannot afford a Python process per
backend. Here each port gets its own simulator (its own engine, its own ``/sim/stats``, seed =
its index), all served by one event loop. Takes the simulator's flags; ``--port`` is ignored.
Ctrl-C or SIGTERM stops every one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Iterator
from dataclasses import replace

import uvicorn

from simulator.server import add_arguments, quiet_injected_drops, settings_from_args, uvicorn_config


class _Server(uvicorn.Server):
    """Signals are handled once for the whole fleet, not by each server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(ports: list[int], ns: argparse.Namespace) -> None:
    base = settings_from_args(ns)
    servers = [
        _Server(uvicorn_config(replace(base, port=port, seed=(base.seed or 0) + i)))
        for i, port in enumerate(ports)
    ]
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    await asyncio.gather(*(server.serve() for server in servers))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m simulator.fleet", description=__doc__)
    parser.add_argument("--ports", required=True, help="comma-separated ports, one simulator each")
    add_arguments(parser)
    ns = parser.parse_args(argv)
    ports = [int(p) for p in ns.ports.split(",") if p]
    quiet_injected_drops()
    asyncio.run(serve(ports, ns))


if __name__ == "__main__":
    main()
