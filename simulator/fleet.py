"""Several simulated backends in one process: ``python -m simulator.fleet --ports 4001,4002 ...``,
or ``--count 16 --ports-file PATH``: bind 16 free ports here and write them to PATH, one a
line, once every one is listening (so no other process can take a port between the choice
and the bind).

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
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import uvicorn

from simulator.server import add_arguments, quiet_injected_drops, settings_from_args, uvicorn_config


class _Server(uvicorn.Server):
    """Signals are handled once for the whole fleet, not by each server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


async def serve(ports: list[int], ns: argparse.Namespace, ports_file: Path | None = None) -> None:
    base = settings_from_args(ns)
    socks = [_listen(base.host, port) for port in ports]
    bound = [int(s.getsockname()[1]) for s in socks]
    servers = [
        _Server(uvicorn_config(replace(base, port=port, seed=(base.seed or 0) + i)))
        for i, port in enumerate(bound)
    ]
    if ports_file is not None:
        tmp = ports_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{p}\n" for p in bound))
        tmp.replace(ports_file)  # whole or not at all
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in zip(servers, socks, strict=True)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m simulator.fleet", description=__doc__)
    parser.add_argument("--ports", default="", help="comma-separated ports, one simulator each")
    parser.add_argument("--count", type=int, default=0, help="this many simulators on free ports")
    parser.add_argument("--ports-file", type=Path, default=None, help="where --count writes the ports it bound")
    add_arguments(parser)
    ns = parser.parse_args(argv)
    ports = [int(p) for p in ns.ports.split(",") if p] + [0] * ns.count
    if not ports:
        parser.error("give --ports or --count")
    quiet_injected_drops()
    asyncio.run(serve(ports, ns, ns.ports_file))


if __name__ == "__main__":
    main()
