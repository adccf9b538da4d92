"""The limit sampler reads a gateway's ``/admin/backends`` in either shape (a list, or
``{"backends": [...]}``) and keeps going past bad answers; the plots write their files."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from loadtests.client import RequestRecord
from loadtests.limit_trace import LimitSampler, write_limit_plot
from loadtests.plots import latency_cdf

BACKEND = {"name": "b0", "limit": 12, "in_flight": 3, "engine": {"running": 7, "waiting": 5}, "long_cap": 4,
           "limit_reason": "engine is queueing", "state": "healthy"}


class Admin(BaseHTTPRequestHandler):
    answers: list[bytes] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def admin() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Admin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def sample(url: str, answers: list[bytes], want: int) -> list[dict]:
    Admin.answers = answers
    with LimitSampler(url, interval_s=0.02) as sampler:
        deadline = time.monotonic() + 10
        while len(sampler.samples) < want and time.monotonic() < deadline:
            time.sleep(0.02)
    return sampler.samples


def test_samples_both_shapes_and_skips_an_answer_that_is_not_json(admin: str) -> None:
    answers = [b"not json", json.dumps([BACKEND]).encode(), json.dumps({"backends": [BACKEND]}).encode()]
    samples = sample(admin, answers, 2)
    assert len(samples) >= 2
    first = samples[0]
    keys = ("backend", "limit", "in_flight", "reason", "state", "running", "waiting", "long_cap", "borrowed")
    assert {k: first[k] for k in keys} == {
        "backend": "b0", "limit": 12, "in_flight": 3, "reason": "engine is queueing", "state": "healthy",
        "running": 7, "waiting": 5, "long_cap": 4, "borrowed": None}
    assert all(s["t"] >= 0 for s in samples)


def test_no_trajectory_no_plot_and_one_gives_a_png(tmp_path: Path) -> None:
    write_limit_plot(tmp_path / "none.png", {"fifo @ 0.9": []}, "limit")
    assert not (tmp_path / "none.png").exists()  # nothing sampled (direct, fixed limits): no empty figure
    samples = [{"t": t, "backend": "b0", "limit": 8 + t, "in_flight": 4, "waiting": None} for t in range(5)]
    write_limit_plot(tmp_path / "plots" / "limit.png", {"adaptive_high @ 0.9": samples}, "limit")
    assert (tmp_path / "plots" / "limit.png").stat().st_size > 0


def test_the_latency_cdf_is_written_even_for_a_class_without_a_success(tmp_path: Path) -> None:
    records = [RequestRecord(0, "short", 0.0, True, 5, ttft_s=0.1, e2e_s=0.5),
               RequestRecord(1, "long", 0.0, False, 5, error="timeout")]  # a class with nothing to plot
    path = latency_cdf(records, tmp_path / "deep" / "cdf.png", "title")
    assert path == tmp_path / "deep" / "cdf.png" and path.stat().st_size > 0
