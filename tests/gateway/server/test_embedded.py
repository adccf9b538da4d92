"""The embedded defaults of ``triage serve`` as child processes: a simulated backend that
answers once started and is gone once stopped, and the readiness wait's other endings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway.server.embedded import EmbeddedRedis, EmbeddedSimulator, await_http_ready, free_port, stop_child


def test_the_simulated_backend_serves_its_model_until_stopped() -> None:
    sim = EmbeddedSimulator("fast", "embedded-model")
    url = sim.start()
    try:
        models = httpx.get(f"{url}/v1/models", timeout=10, trust_env=False).json()
        assert [m["id"] for m in models["data"]] == ["embedded-model"]
        proc = sim._proc
        assert proc is not None and proc.poll() is None
    finally:
        sim.stop()
    assert proc.poll() is not None  # the child is gone
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2, trust_env=False)
    sim.stop()  # twice: nothing left to stop


def test_a_child_that_exits_is_not_ready() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert await_http_ready(proc, f"http://127.0.0.1:{free_port()}/health", timeout_s=30) is False
    assert proc.wait() == 3


def test_stop_child_interrupts_then_waits() -> None:
    # its own Ctrl-C handler: one started where SIGINT is ignored (a background job's) inherits that
    child = ("import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\ntry:\n"
             "    print('ready', flush=True)\n    time.sleep(600)\nexcept KeyboardInterrupt:\n    raise SystemExit(7)")
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"  # its Ctrl-C handling is in place
    stop_child(proc, grace_s=30)
    proc.stdout.close()
    assert proc.returncode == 7  # it got Ctrl-C and cleaned up, not a kill
    stop_child(proc)  # already stopped: nothing to do
    stop_child(None)


def _sigint_blocked(pid: int) -> bool:
    text = Path(f"/proc/{pid}/status").read_text()
    status = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
    return bool(int(status["SigBlk"], 16) & (1 << (signal.SIGINT - 1)))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_terminals_ctrl_c_reaches_the_gateway_but_not_its_children() -> None:
    """Ctrl-C goes to the terminal's whole process group. The embedded Valkey and simulator
    must outlive it until the gateway has drained and stops them itself."""
    redis = EmbeddedRedis()
    url = redis.start()
    try:
        pid = redis._server._process.pid  # type: ignore[union-attr]
        assert _sigint_blocked(pid)  # the terminal's SIGINT is not its to act on
        assert not _sigint_blocked(os.getpid())  # and the gateway's own mask is as it was
        assert url.startswith("redis://127.0.0.1:")
    finally:
        redis.stop()
    sim = EmbeddedSimulator("fast", "m")
    sim.start()
    try:
        assert os.getsid(sim._proc.pid) != os.getsid(0)  # type: ignore[union-attr]
    finally:
        sim.stop()
