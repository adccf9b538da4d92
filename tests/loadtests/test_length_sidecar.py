"""The length sidecar is part of the measuring instrument: a caller that leaves (a gateway
pausing a stream, a client giving up) must stop the generation inside the engine, or the
engine keeps spending its batch on work nobody reads. The engine here is the simulator,
which counts what it generates and what was aborted."""

from __future__ import annotations

import httpx

from loadtests.engines.length_proxy import LengthProxy
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.simulator.conftest import MODEL, wait_for_stats
from tests.support import eventually, running_app

PROMPT = "Tell me a very long story."
LENGTH = 20_000  # far more than the test reads: only an abort ends it early


async def test_a_caller_that_leaves_aborts_the_generation_in_the_engine() -> None:
    with running_simulator(SimSettings(profile="fast", model=MODEL)) as engine, \
            running_app(proxy := LengthProxy(engine, {PROMPT: LENGTH})) as sidecar:
        body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "stream": True}
        async with httpx.AsyncClient(timeout=60) as http:
            async with http.stream("POST", f"{sidecar}/v1/chat/completions", json=body) as resp:
                assert resp.status_code == 200
                async for line in resp.aiter_lines():
                    if '"content":"' in line.replace(" ", ""):
                        break  # one token read; leaving closes the connection
        async with httpx.AsyncClient(base_url=engine, timeout=30) as sim:
            stats = await wait_for_stats(sim, lambda s: s["aborts"] == 1 and s["running"] == 0)
        await eventually(lambda: len(proxy.trace) == 2)  # its own course, written once the engine's stream closed
    assert stats["completed"] == 0
    assert stats["tokens_generated"] < LENGTH
    (asked_at, first, asked, tokens), (left_at, second, how, relayed) = proxy.trace
    assert (first, asked, tokens) == (1, "asked", LENGTH) and (second, how) == (1, "left")
    assert 0 < relayed and asked_at <= left_at


async def test_a_reply_read_to_its_end_is_the_listed_length() -> None:
    with running_simulator(SimSettings(profile="fast", model=MODEL)) as engine, \
            running_app(proxy := LengthProxy(engine, {PROMPT: 40})) as sidecar:
        body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "stream": True,
                "stream_options": {"include_usage": True}}
        async with httpx.AsyncClient(timeout=60) as http:
            async with http.stream("POST", f"{sidecar}/v1/chat/completions", json=body) as resp:
                text = "".join([chunk async for chunk in resp.aiter_text()])
        async with httpx.AsyncClient(base_url=engine, timeout=30) as sim:
            stats = await wait_for_stats(sim, lambda s: s["completed"] == 1)
        await eventually(lambda: len(proxy.trace) == 2)
    assert '"completion_tokens":40' in text.replace(" ", "")
    assert stats["aborts"] == 0
    assert [(n, what) for _, n, what, _ in proxy.trace] == [(1, "asked"), (1, "ended")]
    assert proxy.trace[0][3] == 40 and proxy.trace[1][3] == len(text.encode())  # every byte relayed
