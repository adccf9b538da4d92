"""``python -m simulator.fleet``: several simulators in one process, each on its own port
with its own engine; the ports file is written whole once every one listens."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import httpx
import pytest

from simulator.fleet import main
from tests.support import eventually


def test_without_ports_or_a_count_it_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2 and "give --ports or --count" in capsys.readouterr().err


def read(path: Path) -> str:
    return path.read_text()


def exists(path: Path) -> bool:
    return path.exists()


async def test_a_fleet_of_two_serves_on_the_ports_it_wrote(tmp_path: Path) -> None:
    ports_file = tmp_path / "ports"
    cmd = [sys.executable, "-m", "simulator.fleet", "--count", "2", "--ports-file", str(ports_file),
           "--profile", "fast", "--model", "fleet-model"]
    proc = await asyncio.create_subprocess_exec(*cmd)
    try:
        await eventually(ports_file.exists, within_s=60, every_s=0.1)
        ports = [int(p) for p in read(ports_file).split()]
        assert len(set(ports)) == 2 and not exists(tmp_path / "ports.tmp")
        async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
            body = {"model": "fleet-model", "prompt": "hi", "max_tokens": 3, "ignore_eos": True}
            first = await http.post(f"http://127.0.0.1:{ports[0]}/v1/completions", json=body)
            assert first.status_code == 200 and first.json()["usage"]["completion_tokens"] == 3
            stats = [(await http.get(f"http://127.0.0.1:{p}/sim/stats")).json() for p in ports]
        assert [s["total_requests"] for s in stats] == [1, 0]  # each its own engine
    finally:
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 0  # Ctrl-C stops every one, cleanly
