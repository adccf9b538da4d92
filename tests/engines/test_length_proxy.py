"""The benchmark's length sidecar in front of the real vLLM: replies stop at the listed
length, a continuation gets the rest of it, and unlisted requests pass unchanged."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from loadtests.engines.cli import main as engine_main
from loadtests.engines.length_proxy import LengthProxy
from loadtests.engines.vllm import VllmServer
from scheduler.queue.keys import PoolKeys
from tests.engines.calls import granted_or_ended
from tests.engines.conftest import ONE_SLOT, PAUSING
from tests.engines.test_vllm import (
    LONG,
    SHORT,
    engine_idle,
    engine_metric,
    events,
    on_engine,
    resumes,
    stream,
)
from tests.support import running_app

LISTED = {"Tell me about queues.": 23, "Once upon a time": 17}


@pytest.fixture
def proxy(vllm: VllmServer) -> Iterator[str]:
    with running_app(LengthProxy(vllm.url, dict(LISTED))) as url:
        yield url


async def test_a_listed_prompt_stops_at_its_length_without_max_tokens(vllm: VllmServer, proxy: str) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        chat = await http.post(f"{proxy}/v1/chat/completions", json={
            "model": vllm.model, "messages": [{"role": "user", "content": "Tell me about queues."}]})
        done = await http.post(f"{proxy}/v1/completions", json={"model": vllm.model, "prompt": "Once upon a time"})
    assert chat.status_code == done.status_code == 200
    assert chat.json()["usage"]["completion_tokens"] == 23
    assert done.json()["usage"]["completion_tokens"] == 17


async def test_a_continuation_gets_the_rest_of_its_length(vllm: VllmServer, proxy: str) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        so_far = "Queues are lines of work"
        count = (await http.post(f"{vllm.url}/tokenize", json={"model": vllm.model, "prompt": so_far,
                                                               "add_special_tokens": False})).json()["count"]
        chat = await http.post(f"{proxy}/v1/chat/completions", json={
            "model": vllm.model, "continue_final_message": True, "add_generation_prompt": False,
            "messages": [{"role": "user", "content": "Tell me about queues."},
                         {"role": "assistant", "content": so_far}]})
        done = await http.post(f"{proxy}/v1/completions", json={"model": vllm.model,
                                                                "prompt": "Once upon a time" + so_far})
    assert chat.json()["usage"]["completion_tokens"] == 23 - count
    assert done.json()["usage"]["completion_tokens"] == 17 - count


async def test_a_continuation_from_token_ids_gets_the_rest_of_its_length(vllm: VllmServer, proxy: str) -> None:
    """A listed request's stream that asked for token ids teaches the sidecar its prompt's ids;
    a completions prompt of those ids followed by some made since is that request's
    continuation, and gets the rest of its length."""
    async with httpx.AsyncClient(timeout=120) as http:
        first = events(await stream(http, proxy, {
            "model": vllm.model, "stream": True, "return_token_ids": True,
            "messages": [{"role": "user", "content": "Tell me about queues."}]}))
        prompt_ids = first[0]["prompt_token_ids"]
        made = [i for e in first for c in e["choices"] for i in c.get("token_ids") or []]
        rest = await http.post(f"{proxy}/v1/completions", json={"model": vllm.model, "prompt": prompt_ids + made[:5]})
        other = await http.post(f"{proxy}/v1/completions", json={"model": vllm.model, "prompt": [7, 8, 9],
                                                                  "max_tokens": 2})
    assert len(made) == 23
    assert rest.json()["usage"]["completion_tokens"] == 23 - 5
    assert other.json()["usage"]["completion_tokens"] == 2  # ids of no listed prompt: passed through


async def test_unlisted_requests_and_other_paths_pass_through(vllm: VllmServer, proxy: str) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        resp = await http.post(f"{proxy}/v1/completions", json={"model": vllm.model, "prompt": "unlisted",
                                                                "max_tokens": 3, "ignore_eos": True})
        models = await http.get(f"{proxy}/v1/models")
    assert resp.json()["usage"]["completion_tokens"] == 3
    assert models.status_code == 200 and models.json()["data"][0]["id"] == vllm.model


def test_the_command_builds_the_model_folder(vllm: VllmServer, tmp_path: Path) -> None:
    assert engine_main(["--build-only", "--model-dir", str(tmp_path / "m"), "--seed", "3"]) == 0
    assert (tmp_path / "m" / "model.safetensors").is_file() and (tmp_path / "m" / "tokenizer.json").is_file()


async def test_a_stream_paused_through_the_sidecar_costs_vllm_only_what_was_delivered(
    vllm: VllmServer, engine_gateway: Callable[..., str], engine_redis: Redis, prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The benchmark's own path: gateway → sidecar → vLLM, no ``max_tokens`` from the client.
    A long stream paused for a short request must stop generating inside vLLM when the
    gateway closes it. The sidecar asks vLLM for each part's true rest (``max_tokens``), so a
    part that runs to its end counts in vLLM's ``request_success_total`` and an aborted one
    does not: two successes (the short request, the resumed part) is the paused part aborted,
    three is it run on to its end. What the abort wasted (the tokens in flight between the
    pause and vLLM's abort: about 100 on a quiet machine, more on a busy one) is shown, not
    bounded: how soon an abort lands is speed, not behaviour."""
    lengths = {"a long story": 3000, "quick": 5}
    caplog.set_level(logging.WARNING, logger="triage")
    with running_app(proxy := LengthProxy(vllm.url, dict(lengths))) as sidecar:
        url = engine_gateway(ONE_SLOT | {"url": sidecar}, **PAUSING)
        keys = PoolKeys(prefix, "default")
        await on_engine(lambda: engine_idle(vllm), within_s=60)
        before = await engine_metric(vllm, "vllm:generation_tokens_total")
        finished = await engine_metric(vllm, "vllm:request_success_total")
        body = {"model": vllm.model, "stream": True, "stream_options": {"include_usage": True}}
        async with httpx.AsyncClient(timeout=600) as http:
            # queued behind the victim once it holds the slot: paused as soon as it may be
            victim = await granted_or_ended(lambda: stream(http, url, {**body, "messages": [
                {"role": "user", "content": "a long story"}]}, LONG), engine_redis, keys, "vllm", within_s=120)
            sent = (time.monotonic(), victim.done())  # when the short one went, and whether the victim had ended
            short = await stream(http, url, {**body, "messages": [{"role": "user", "content": "quick"}]}, SHORT)
            raw = await victim
            resumed = await resumes(http, url)
        await on_engine(lambda: engine_idle(vllm), within_s=60)
        generated = await engine_metric(vllm, "vllm:generation_tokens_total") - before
        succeeded = await engine_metric(vllm, "vllm:request_success_total") - finished
    # each part's course at the sidecar, in seconds from the first: which hop was late, if any
    start = proxy.trace[0][0] if proxy.trace else 0.0
    course = [(round(at - start, 3), n, what, value) for at, n, what, value in proxy.trace]
    warnings = [r.getMessage() for r in caplog.records]  # e.g. a pause this gateway did not act on
    # the dispatch script counts why it did not pause (``unpaused_<rule>``) in the pool's stats
    short_sent = (round(sent[0] - start, 3), "victim ended first" if sent[1] else "victim running")
    assert b": paused" in raw, (await engine_redis.hgetall(keys.stats), course, short_sent, warnings)
    assert resumed == {"token_ids": 1}  # the sidecar knew the continuation by its ids
    delivered = sum(e["usage"]["completion_tokens"] for e in (*events(raw), *events(short)) if e.get("usage"))
    assert delivered == 3005  # the sidecar's lengths, both parts of the long one summed
    assert succeeded == 2, (succeeded, generated, delivered, course)  # the paused part was aborted inside vLLM
    assert delivered <= generated, (generated, delivered)
