"""Pause and resume through the gateway and a real simulator: a long stream holding the
only slot is paused for a short request and resumed after it; the client sees one
response whose content is byte for byte the unpaused one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL, busy_is, eventually, progress_past, queue_is

LONG = {"x-triage-expected-tokens": "2000"}  # predicted long: it may be paused
SHORT = {"x-triage-expected-tokens": "5"}


@pytest.fixture
def slow_sim(request: pytest.FixtureRequest) -> Iterator[str]:
    """Ten times slower than `fast` (about 10 ms a token): a long stream stays open for seconds.
    In vLLM's dialect, or the one a test asks for (``indirect``)."""
    dialect = getattr(request, "param", "vllm")
    settings = SimSettings(profile="fast", model=MODEL, max_num_seqs=8, time_scale=10.0, dialect=dialect)
    with running_simulator(settings) as url:
        yield url


@pytest.fixture
def paused_gateway(gateway_factory: Callable[..., str], slow_sim: str) -> Callable[..., str]:
    def start(resume: str = "vllm") -> str:
        backend = {"name": "sim", "url": slow_sim, "models": [MODEL], "max_concurrency": 1, "adaptive": False,
                   "resume": resume}
        return gateway_factory([backend], preempt=True, quantum_tokens=4, max_pauses=2, heartbeat_s=0.05)

    return start


def chat(content: str, tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


def completion(prompt: str, tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}


def path_of(body: dict[str, Any]) -> str:
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"


async def stream(http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    async with http.stream("POST", f"{url}{path_of(body)}", json=body, headers=headers) as resp:
        assert resp.status_code == 200
        return b"".join([chunk async for chunk in resp.aiter_raw()])


def events(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]


def content(raw: bytes) -> str:
    out = []
    for e in events(raw):
        for c in e.get("choices") or []:
            out.append((c.get("delta") or {}).get("content") or c.get("text") or "")
    return "".join(out)


async def paused_count(redis: Redis, keys: PoolKeys) -> int:
    return int(await redis.hget(keys.stats, "paused") or 0)


@pytest.mark.parametrize("slow_sim", ["vllm", "llamacpp"], indirect=True)
@pytest.mark.parametrize("make_body", [chat, completion], ids=["chat", "completions"])
async def test_a_paused_stream_is_the_unpaused_one(
    paused_gateway: Callable[..., str], slow_sim: str, redis: Redis, prefix: str, make_body: Callable[..., dict],
) -> None:
    """On the simulator's vLLM dialect (the ids in ``token_ids``) and its llama.cpp dialect (the
    ids in ``logprobs``, the continuation the rendered prompt followed by the ids)."""
    async with httpx.AsyncClient() as http:
        engine = (await http.get(f"{slow_sim}/v1/models")).json()["data"][0]["owned_by"]
    url = paused_gateway("llamacpp" if engine == "llamacpp" else "vllm")
    keys = PoolKeys(prefix, "default")
    long_body = make_body("write me a long story about queues", 400)
    async with httpx.AsyncClient(timeout=120) as http:
        direct = await stream(http, slow_sim, long_body, {})
        victim = asyncio.create_task(stream(http, url, long_body, LONG))
        for pause in range(2):  # paused twice: max_pauses
            await eventually(lambda: progress_past(redis, keys, 4), within_s=60)
            short = await stream(http, url, make_body(f"a quick question {pause}", 5), SHORT)
            assert content(short) and b"data: [DONE]" in short
            assert await paused_count(redis, keys) == pause + 1
        raw = await victim
    assert raw.count(b": paused") >= 2
    assert content(raw) == content(direct)  # continues exactly where it paused, twice
    chunks = events(raw)
    assert len({e["id"] for e in chunks}) == 1 and len({e["created"] for e in chunks}) == 1
    finishes = [c["finish_reason"] for e in chunks for c in e["choices"] if c.get("finish_reason")]
    assert finishes == ["length"]
    if make_body is chat:
        assert sum(1 for e in chunks for c in e["choices"] if (c.get("delta") or {}).get("role")) == 1
    usage = [e["usage"] for e in chunks if e.get("usage")]
    assert len(usage) == 1 and usage == [e["usage"] for e in events(direct) if e.get("usage")]  # summed over parts
    if engine == "llamacpp":  # its timings on the last chunk only: the last part's, counted over every part
        assert [bool(e.get("timings")) for e in chunks][-2:] == [False, True]
        assert chunks[-1]["timings"]["predicted_n"] < 400
    assert raw.endswith(b"data: [DONE]\n\n")
    async with httpx.AsyncClient(timeout=30) as http:

        async def done() -> bool:  # its trace ends just after its last byte
            return (await http.get(f"{url}/admin/stats")).json()["classes"]["medium"]["requests"] == 1

        await eventually(done)  # class medium: the hint, capped by max_tokens 400
        stats = (await http.get(f"{url}/admin/stats")).json()["classes"]["medium"]
        metrics = (await http.get(f"{url}/metrics")).text
    assert stats["pauses_per_request"] == 2.0
    assert 'triage_pauses_total{triage_backend="sim",triage_class="medium"} 2' in metrics
    # the simulator's vLLM dialect tells token ids: both continuations carried them (exact resume)
    assert 'triage_resumes_total{triage_backend="sim",triage_resume_from="token_ids"} 2' in metrics
    assert 'triage_resume_from="text"' not in metrics
    assert "triage_resume_prefill_tokens_total" in metrics


async def test_a_client_that_leaves_while_paused_frees_everything(
    paused_gateway: Callable[..., str], slow_sim: str, redis: Redis, prefix: str,
) -> None:
    url = paused_gateway()
    keys = PoolKeys(prefix, "default")
    async with httpx.AsyncClient(timeout=120) as http:
        async with http.stream("POST", f"{url}/v1/chat/completions", json=chat("a long one", 400), headers=LONG) as a:
            lines = a.aiter_lines()
            await eventually(lambda: progress_past(redis, keys, 4), within_s=60)
            # a "short" request that runs long holds the slot: the paused one stays paused
            hog = asyncio.create_task(stream(http, url, chat("mispredicted", 600), SHORT))
            async for line in lines:
                if line == ": paused":
                    break
        await eventually(lambda: queue_is(redis, keys, 0))  # its continuation left the queue
        hog.cancel()
    await eventually(lambda: sim_running(slow_sim, 0))
    await eventually(lambda: busy_is(redis, keys, 0))


async def test_no_pause_on_a_backend_that_cannot_resume(
    paused_gateway: Callable[..., str], redis: Redis, prefix: str,
) -> None:
    url = paused_gateway(resume="none")
    keys = PoolKeys(prefix, "default")
    async with httpx.AsyncClient(timeout=120) as http:
        long_body = chat("write me a long story about queues", 150)
        victim = asyncio.create_task(stream(http, url, long_body, LONG))
        await eventually(lambda: busy_is(redis, keys, 1))
        short = await stream(http, url, chat("quick", 5), SHORT)  # waits for the long one to end
        raw = await victim
    assert b": paused" not in raw and content(short)
    assert await paused_count(redis, keys) == 0 and not await redis.hgetall(keys.progress)


async def sim_running(sim: str, n: int) -> bool:
    async with httpx.AsyncClient(timeout=10) as http:
        return (await http.get(f"{sim}/sim/stats")).json()["running"] == n


async def test_a_paused_whole_request_gets_the_answer_it_would_have_got(
    paused_gateway: Callable[..., str], slow_sim: str, redis: Redis, prefix: str,
) -> None:
    """A client that does not stream: once the backend has answered one such request (its
    shape), the next is streamed upstream, paused for a short request, resumed, and
    answered with the JSON the simulator gives the same request unpaused."""
    url = paused_gateway()
    keys = PoolKeys(prefix, "default")
    long_body = chat("write me a long story about queues", 300) | {"stream": False}
    long_body.pop("stream_options")
    async with httpx.AsyncClient(timeout=120) as http:
        direct = (await http.post(f"{slow_sim}/v1/chat/completions", json=long_body)).json()
        teach = await http.post(f"{url}/v1/chat/completions", json=chat("hello", 3) | {"stream": False}, headers=SHORT)
        assert teach.status_code == 200
        victim = asyncio.create_task(http.post(f"{url}/v1/chat/completions", json=long_body, headers=LONG))
        await eventually(lambda: progress_past(redis, keys, 4), within_s=60)
        short = await stream(http, url, chat("a quick question", 5), SHORT)
        assert content(short) and await paused_count(redis, keys) == 1
        answer = await victim
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/json")
    got = answer.json()
    assert {k: v for k, v in got.items() if k not in ("id", "created")} == {
        k: v for k, v in direct.items() if k not in ("id", "created")
    }  # the text continued exactly where it paused, the usage summed over both parts
    assert got["id"].startswith("chatcmpl-")
