"""The pure parts: percentiles, added latency, the profile reader, /proc parsing."""

from __future__ import annotations

import os
from pathlib import Path

from loadtests.overhead import procstat, profiling, report
from loadtests.overhead.httpclient import Connection, Exchange
from loadtests.overhead.stats import percentile, summarize_ns


def test_percentile_interpolates() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert summarize_ns([1_000_000, 3_000_000])["p50"] == 2.0


def test_added_is_target_minus_direct_at_the_same_rate() -> None:
    def step(target: str, ttft: float) -> dict:
        ms = {"p50": ttft, "p90": ttft, "p99": ttft * 2}
        return {"target": target, "rps": 100.0, "stream": True, "ttft_ms": ms, "e2e_ms": ms, "itl_ms": ms,
                "errors": 0, "error_kinds": {}}

    rows = report.entries([step("fifo", 3.0), step("direct", 1.0)])
    assert [r["target"] for r in rows] == ["direct", "fifo"]
    assert rows[1]["added_ttft_p50_ms"] == 2.0
    assert rows[1]["added_ttft_p99_ms"] == 4.0
    assert report.sanitize({"x": float("nan")}) == {"x": None}


def test_litellm_is_compared_only_where_both_sustained_the_rate() -> None:
    def step(target: str, rps: float, ttft: float, errors: int = 0, achieved: float | None = None) -> dict:
        ms = {"p50": ttft, "p90": ttft, "p99": ttft}
        return {"target": target, "rps": rps, "stream": True, "ttft_ms": ms, "e2e_ms": ms, "itl_ms": ms,
                "errors": errors, "error_kinds": {}, "achieved_rps": rps if achieved is None else achieved}

    steps = [step("direct", 25, 1.0), step("short_first", 25, 3.0), step("litellm", 25, 17.0),
             step("direct", 100, 1.0), step("short_first", 100, 3.0), step("litellm", 100, 900.0, errors=5),
             step("direct", 500, 1.0), step("short_first", 500, 9.0, achieved=400), step("litellm", 500, 30.0)]
    doc = report.build(steps, [], None, [], {})
    rows = {r["rps"]: r for r in doc["against_litellm"]["stream"]}
    assert rows[25]["ratio"] == 8.0 and rows[25]["why_not"] is None
    assert rows[100]["ratio"] is None and rows[100]["why_not"] == "litellm did not sustain 100 RPS"
    assert rows[500]["ratio"] is None and rows[500]["why_not"] == "short_first did not sustain 500 RPS"
    text = report.markdown(doc)
    assert "- streamed, 25 RPS, short_first: **8.0×** lower (2.00 against 16.00 ms)" in text
    assert "- streamed, 100 RPS, short_first: not compared: litellm did not sustain 100 RPS" in text
    assert report.build([step("direct", 25, 1.0), step("short_first", 25, 3.0)], [], None, [], {})[
        "against_litellm"] == {"stream": [], "nonstream": []}


def test_hot_spots_from_collapsed_stacks(tmp_path: Path) -> None:
    raw = tmp_path / "p.txt"
    raw.write_text("main (a.py:1);work (b.py:2) 3\nmain (a.py:1);work (b.py:9);json (c.py:4) 1\n")
    samples, spots = profiling.hot_spots(raw)
    assert samples == 4
    assert spots[0].frame == "work (b.py)" and spots[0].self_pct == 75.0 and spots[0].total_pct == 100.0


def test_proc_stat_of_this_process() -> None:
    assert procstat.cpu_seconds(os.getpid()) > 0
    assert procstat.alive(os.getpid())
    assert procstat.cpu_seconds(2**22 + 12345) == 0.0


def test_connection_parses_a_chunked_stream() -> None:
    done: list[Exchange] = []
    conn = Connection(lambda c, ex: done.append(ex), lambda c: None)

    class Sink:
        def write(self, data: bytes) -> None:
            pass

        def close(self) -> None:
            pass

    conn.connection_made(Sink())  # type: ignore[arg-type]
    conn.send(b"", Exchange(0, 0, keep_gaps=True, keep_body=False))
    frames = b'data: {"delta":{"role":"assistant","content":""}}\n\ndata: {"delta":{"content":" a"}}\n\n'
    frames2 = b'data: {"delta":{"content":" b"}}\n\ndata: [DONE]\n\n'
    body = b"".join(b"%x\r\n%s\r\n" % (len(f), f) for f in (frames, frames2)) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n"
    conn.data_received(head + body[:40])
    conn.data_received(body[40:])
    assert len(done) == 1
    ex = done[0]
    assert ex.error == "" and ex.status == 200 and ex.tokens == 2 and ex.first_ns > 0 and ex.end_ns >= ex.first_ns
