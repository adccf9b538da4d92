"""The gateway in front of a real llama.cpp ``llama-server`` (a tiny random-weight Llama as
GGUF, one server for the module): what the simulator's ``llamacpp`` dialect only imitates.

Skipped, with the reason, where no llama.cpp is installed (``.ci/run`` builds one into
``.venv-llamacpp``). Bodies carry ``ignore_eos`` (llama-server honours it), so every length
asserted is exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from loadtests.engines.length_proxy import LengthProxy
from loadtests.engines.llamacpp import LlamaCpp, LlamaServer, LlamaSpec, build_model, find, running_llamacpp
from loadtests.engines.tiny_model import _texts
from loadtests.engines.vllm import CORPUS, EngineUnavailable, metric, parse_metrics
from scheduler import tasks
from scheduler.queue.keys import PoolKeys
from tests.engines.calls import (
    chat,
    chunk_fields,
    completion,
    events,
    granted_or_ended,
    path_of,
    paused_whole,
    resumes,
    stream,
    text_of,
)
from tests.engines.conftest import PAUSING, gateways_in_front
from tests.simulator.llamacpp_shapes import CASES as SHAPE_CASES
from tests.simulator.llamacpp_shapes import recorded as recorded_shapes
from tests.simulator.shapes import answered_shapes
from tests.support import eventually, running_app

SLOTS = 4
CTX_PER_SLOT = 16384
LONG = 15000  # output tokens: a request that holds its slot until cancelled


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[LlamaCpp, Path]:
    """The installed llama.cpp and the tiny GGUF it serves."""
    try:
        engine = find()
        return engine, build_model(engine, tmp_path_factory.mktemp("tiny-gguf"))
    except EngineUnavailable as exc:
        pytest.skip(f"no llama.cpp to test against: {exc}")


@pytest.fixture(scope="module")
def llama(installed: tuple[LlamaCpp, Path]) -> Iterator[LlamaServer]:
    engine, model = installed
    # 16k tokens a slot: a long request holds its slot for seconds, not one second
    with running_llamacpp(LlamaSpec(model, parallel=SLOTS, ctx_size=SLOTS * CTX_PER_SLOT), engine) as server:
        yield server


@pytest.fixture
def gateway(llama: LlamaServer, embedded_redis_url: str, prefix: str) -> Iterator[Callable[..., str]]:
    with ExitStack() as stack:
        backend = {"name": "llama", "url": llama.url, "models": [llama.model], "max_concurrency": SLOTS}
        yield gateways_in_front(stack, backend, embedded_redis_url, prefix)


async def engine_metric(llama: LlamaServer, name: str) -> float:
    async with httpx.AsyncClient(timeout=10, verify=False, trust_env=False) as http:
        return metric(parse_metrics((await http.get(f"{llama.url}/metrics")).text), name)


async def slots_busy(llama: LlamaServer) -> int:
    async with httpx.AsyncClient(timeout=10, verify=False, trust_env=False) as http:
        return sum(1 for s in (await http.get(f"{llama.url}/slots")).json() if s.get("is_processing"))


async def test_llamacpp_answers_in_the_shapes_the_simulator_copies(llama: LlamaServer) -> None:
    """The simulator's ``llamacpp`` dialect is checked against what llama-server answered
    (``tests/simulator/data/llamacpp-shapes.json``); here that record is checked against the
    server itself (``tests/simulator/llamacpp_shapes.py``)."""
    assert await answered_shapes(llama.url, llama.model, SHAPE_CASES) == recorded_shapes()


@pytest.mark.parametrize("make", [chat, completion], ids=["chat", "completions"])
async def test_non_streamed_requests_pass_through_with_usage(
    llama: LlamaServer, gateway: Callable[..., str], make: Callable[..., dict]
) -> None:
    url = gateway()
    async with httpx.AsyncClient(timeout=120) as http:
        resp = await http.post(f"{url}{path_of(make(llama, 1, False))}", json=make(llama, 12, False))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 12 and body["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize("make", [chat, completion], ids=["chat", "completions"])
@pytest.mark.parametrize("usage", [None, False, True], ids=["no-options", "usage-off", "usage-on"])
async def test_streams_pass_through_with_usage_where_llamacpp_sends_it(
    llama: LlamaServer, gateway: Callable[..., str], make: Callable[..., dict], usage: bool | None
) -> None:
    """Usage as the client asked, or as llama.cpp sends it unasked: on chat it comes only when
    asked, in a chunk of its own; on completions it rides on the finish chunk, asked or not.
    The gateway asks for it (to count tokens) and strips only what it added."""
    url = gateway()
    body = make(llama, 10, True, usage)
    async with httpx.AsyncClient(timeout=120) as http:
        raw = await stream(http, url, body)
        direct = events(await stream(http, llama.url, body))
    chunks = events(raw)
    assert raw.endswith(b"data: [DONE]\n\n")
    with_usage = [e["usage"] for e in chunks if e.get("usage")]
    assert len(with_usage) == sum(1 for e in direct if e.get("usage"))
    if usage:
        assert len(with_usage) == 1 and with_usage[0]["completion_tokens"] == 10
    elif make is chat:  # the gateway asked llama.cpp for usage (to count tokens) and strips it again
        assert with_usage == []
    else:  # llama.cpp's own habit, kept
        assert len(with_usage) == 1 and with_usage[0]["completion_tokens"] == 10
    finishes = [c["finish_reason"] for e in chunks for c in e["choices"] if c.get("finish_reason")]
    assert finishes == ["length"]


async def test_the_gateway_reads_llamacpps_own_metrics(llama: LlamaServer, gateway: Callable[..., str]) -> None:
    """The engine is told apart by its ``llamacpp:`` metrics, and its running count is read."""
    url = gateway()
    async with httpx.AsyncClient(timeout=60) as http:

        async def view() -> dict[str, Any]:
            return (await http.get(f"{url}/admin/backends")).json()["backends"][0]

        async def detected() -> bool:
            v = await view()
            return v["engine_profile"] == "llamacpp" and v["engine"]["running"] == 0

        await eventually(detected, within_s=30, every_s=0.1)
        models = (await http.get(f"{url}/v1/models")).json()
    assert llama.model in [m["id"] for m in models["data"]]


async def test_a_client_that_disconnects_frees_its_llamacpp_slot(
    llama: LlamaServer, gateway: Callable[..., str]
) -> None:
    """The client leaves at its first content token; the gateway closes its stream and
    llama.cpp stops the task: its slot is free and far fewer tokens than asked were made."""
    url = gateway()
    asked = 20000
    await eventually(lambda: _idle(llama), within_s=30, every_s=0.1)
    before = await engine_metric(llama, "llamacpp:tokens_predicted_total")
    async with httpx.AsyncClient(timeout=120) as http:
        async with http.stream("POST", f"{url}/v1/chat/completions", json=chat(llama, asked, True)) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: {") and any(
                    (c.get("delta") or {}).get("content") for c in orjson.loads(line[6:])["choices"]
                ):
                    break
    await eventually(lambda: _idle(llama), within_s=30, every_s=0.1)
    made = await engine_metric(llama, "llamacpp:tokens_predicted_total") - before
    assert made < asked // 2, made


async def _idle(llama: LlamaServer) -> bool:
    return await slots_busy(llama) == 0


async def test_llamacpp_queues_past_its_slots_and_the_adaptive_limit_reads_it(
    llama: LlamaServer, gateway: Callable[..., str]
) -> None:
    """llama.cpp does not refuse a request when every slot is busy: it defers it
    (``llamacpp:requests_deferred``). The gateway reads that queue from ``/metrics`` and cuts
    its limit, so the queue moves back to the gateway. (Latency targets off: only the
    engine's queue is under test.)"""
    sent = SLOTS + 2
    url = gateway({"max_concurrency": sent, "adaptive": True}, ttft_target_s=None, tpot_target_s=None)
    await eventually(lambda: _idle(llama), within_s=30, every_s=0.1)
    async with httpx.AsyncClient(timeout=300) as http:
        runs = [asyncio.create_task(stream(http, url, chat(llama, LONG, True, text=f"story {i}")))
                for i in range(sent)]
        try:

            async def view() -> dict[str, Any]:
                return (await http.get(f"{url}/admin/backends")).json()["backends"][0]

            async def sees_the_engine_queue() -> bool:
                engine = (await view())["engine"]
                return engine["running"] == SLOTS and engine["waiting"] == sent - SLOTS

            await eventually(sees_the_engine_queue, within_s=60, every_s=0.1)
            assert await engine_metric(llama, "llamacpp:requests_deferred") == sent - SLOTS

            async def limit_cut() -> bool:
                v = await view()
                return v["limit"] < sent and v["limit_reason"] == "engine is queueing"

            await eventually(limit_cut, within_s=60, every_s=0.1)
        finally:
            await tasks.stop(runs)  # the clients leave
    await eventually(lambda: _idle(llama), within_s=60, every_s=0.1)


VICTIM = 1000  # output tokens: long enough to be running when the short request comes


def shapes(chunks: list[dict[str, Any]]) -> list[bytes]:
    """``chunk_fields`` less llama.cpp's ``timings`` (its clock) and the usage (compared apart)."""
    return chunk_fields([{k: v for k, v in e.items() if k not in ("timings", "usage")} for e in chunks])


@pytest.mark.parametrize("make", [chat, completion], ids=["chat", "completions"])
async def test_a_paused_stream_resumes_on_llamacpp_token_for_token(
    llama: LlamaServer, gateway: Callable[..., str], engine_redis: Redis, prefix: str, make: Callable[..., dict]
) -> None:
    """A long stream holding the gateway's only slot is paused for a short request and
    resumed from the tokens it made: llama.cpp tells each sampled token's id in its
    ``logprobs`` (asked with ``n_probs``), and the continuation is a completions request whose
    prompt is the prompt's text (chat: as ``/apply-template`` renders it) followed by those
    ids. Under greedy decoding the client gets what an unpaused stream of the same request
    gets: the same text, the same chunks (llama.cpp's chat chunks on chat), one role chunk,
    one finish, usage with the original prompt and both parts' tokens. The slot that held
    the victim still holds its tokens: the continuation reads back almost none of them."""
    url = gateway({"max_concurrency": 1, "adaptive": False, "resume": "llamacpp"}, **PAUSING)
    keys = PoolKeys(prefix, "default")
    await eventually(lambda: _idle(llama), within_s=30, every_s=0.1)
    body = make(llama, VICTIM, True, True, "a long story") | {"temperature": 0}
    async with httpx.AsyncClient(timeout=300) as http:
        tries: list[dict[str, Any]] = []
        for _ in range(3):  # once more if the victim ended before the short request came
            read_before = await engine_metric(llama, "llamacpp:prompt_tokens_total")
            # queued behind the victim once it holds the slot: paused as soon as it may be
            victim = await granted_or_ended(lambda: stream(http, url, body, {"x-triage-expected-tokens": "2000"}),
                                            engine_redis, keys, "llama", within_s=60)
            short = await stream(http, url, make(llama, 5, True, True, "quick"), {"x-triage-expected-tokens": "5"})
            raw = await victim
            read = await engine_metric(llama, "llamacpp:prompt_tokens_total") - read_before
            tries.append({"stats": await engine_redis.hgetall(keys.stats)})
            await engine_redis.delete(keys.progress)
            if b": paused" in raw:
                break
        resumed = await resumes(http, url)
        unpaused = events(await stream(http, llama.url, body))
    assert [e["usage"]["completion_tokens"] for e in events(short) if e.get("usage")] == [5], short[-600:]
    assert b": paused" in raw and raw.endswith(b"data: [DONE]\n\n"), tries
    assert resumed == {"token_ids": 1}
    chunks = events(raw)
    assert len({e["id"] for e in chunks}) == 1
    assert [c["finish_reason"] for e in chunks for c in e["choices"] if c.get("finish_reason")] == ["length"]
    if make is chat:
        assert sum(1 for e in chunks for c in e["choices"] if (c.get("delta") or {}).get("role")) == 1
    assert text_of(chunks) == text_of(unpaused) and len(text_of(chunks)) > 0
    assert shapes(chunks) == shapes(unpaused)
    usage = [e["usage"] for e in chunks if e.get("usage")]
    expected = [e["usage"] for e in unpaused if e.get("usage")]
    assert len(usage) == 1 and usage[0]["completion_tokens"] == VICTIM
    assert usage[0]["prompt_tokens"] == expected[0]["prompt_tokens"]
    # what the pause cost llama.cpp: the prompts of both requests, and of the continuation
    # only what its slot no longer held (it lands on the slot that holds its tokens)
    prompt = expected[0]["prompt_tokens"]
    short_prompt = events(short)[-1]["usage"]["prompt_tokens"]
    assert read <= prompt + short_prompt + 16, (read, prompt, short_prompt)


@pytest.mark.parametrize("make", [chat, completion], ids=["chat", "completions"])
async def test_a_paused_whole_request_gets_llamacpps_own_answer(
    llama: LlamaServer, gateway: Callable[..., str], engine_redis: Redis, prefix: str, make: Callable[..., dict]
) -> None:
    """A client that does not stream, on llama.cpp: streamed upstream, paused for a short
    request, resumed from its token ids, and answered with the JSON llama.cpp gives the
    same request unpaused (greedy): its fields in its order, this request's values (its
    ``timings`` are the last part's: llama.cpp's clock, not compared)."""
    url = gateway({"max_concurrency": 1, "adaptive": False, "resume": "llamacpp"}, **PAUSING)
    keys = PoolKeys(prefix, "default")
    body = make(llama, VICTIM, False, None, "a long story") | {"temperature": 0}
    path = path_of(body)
    await eventually(lambda: _idle(llama), within_s=30, every_s=0.1)
    async with httpx.AsyncClient(timeout=300) as http:
        taught = await http.post(f"{url}{path}", json=make(llama, 3, False), headers={"x-triage-expected-tokens": "3"})
        assert taught.status_code == 200  # its first plain answer: llama.cpp's shape
        answer, short, stats, tries = await paused_whole(
            http, url, body, make(llama, 5, True, True, "quick"), engine_redis, keys,
            ({"x-triage-expected-tokens": "2000"}, {"x-triage-expected-tokens": "5"}), tries=3, within_s=60,
            backend="llama",
        )
        unpaused = (await http.post(f"{llama.url}{path}", json=body)).json()
        resumed = await resumes(http, url)
    assert [e["usage"]["completion_tokens"] for e in events(short) if e.get("usage")] == [5]
    assert answer.status_code == 200 and stats.get(b"paused") == b"1", tries
    got = answer.json()
    assert resumed == {"token_ids": 1}
    assert list(got) == list(unpaused)  # llama.cpp's fields, in its order
    mine = ("id", "created", "timings", "usage")
    assert {k: v for k, v in got.items() if k not in mine} == {k: v for k, v in unpaused.items() if k not in mine}
    # usage: the same tokens; of the prompt, those the cache held when the victim came (the
    # unpaused request came later, with the prompt cached)
    cached = got["usage"].pop("prompt_tokens_details")["cached_tokens"]
    assert 0 <= cached <= unpaused["usage"].pop("prompt_tokens_details")["cached_tokens"]
    assert got["usage"] == unpaused["usage"]
    assert got["timings"]["predicted_n"] < VICTIM  # the last part's


async def test_the_length_sidecar_stops_llamacpps_replies_at_their_length(llama: LlamaServer) -> None:
    """The benchmark's sidecar in front of llama.cpp: a listed prompt stops at its length
    without ``max_tokens``; a continuation of its text gets the rest, the text counted by
    llama.cpp's own ``/tokenize``; a continuation from token ids (the prompt's text — a chat's
    as llama.cpp renders it — then the ids made) gets the length less those ids."""
    lengths = {"Tell me about queues.": 23, "Once upon a time": 17}
    so_far = "Queues are lines of work"
    user = {"role": "user", "content": "Tell me about queues."}
    with running_app(LengthProxy(llama.url, dict(lengths), "llamacpp")) as proxy:
        async with httpx.AsyncClient(timeout=120, trust_env=False) as http:
            count = len((await http.post(f"{llama.url}/tokenize", json={"content": so_far, "add_special": False}))
                        .json()["tokens"])
            answers = [
                await http.post(f"{proxy}/v1/chat/completions", json={"model": llama.model, "messages": [user]}),
                await http.post(f"{proxy}/v1/completions", json={"model": llama.model, "prompt": "Once upon a time"}),
                await http.post(f"{proxy}/v1/chat/completions", json={
                    "model": llama.model, "continue_final_message": True, "add_generation_prompt": False,
                    "messages": [user, {"role": "assistant", "content": so_far}]}),
                await http.post(f"{proxy}/v1/completions", json={"model": llama.model,
                                                                 "prompt": "Once upon a time" + so_far}),
            ]
            rendered = (await http.post(f"{proxy}/apply-template", json={"messages": [user]})).json()["prompt"]
            for head in (rendered, "Once upon a time"):
                answers.append(await http.post(f"{proxy}/v1/completions", json={
                    "model": llama.model, "prompt": [head, 11, 12, 13]}))
    assert count > 0 and "Tell me about queues." in rendered
    assert [a.json()["usage"]["completion_tokens"] for a in answers] == [23, 17, 23 - count, 17 - count, 20, 14]


async def test_every_token_of_a_reply_is_text_from_the_first(llama: LlamaServer) -> None:
    """The tiny model never makes a token that prints nothing (part of a character, a control
    token): llama.cpp would hold the stream's text back behind it, and a benchmark's TTFT
    would measure that silence's decode time instead of the wait for a slot. Each of a
    dozen corpus prompts streams its first text with its first token, and one chunk of text
    per token."""
    prompts = list(_texts(CORPUS, 12))

    async def one(http: httpx.AsyncClient, prompt: str) -> list[tuple[int, str]]:
        body = {"model": llama.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 120,
                "ignore_eos": True, "temperature": 0.0, "stream": True, "timings_per_token": True}
        made = 0
        texts: list[tuple[int, str]] = []  # (tokens made when it came, text)
        for e in events(await stream(http, llama.url, body)):
            made = (e.get("timings") or {}).get("predicted_n", made)
            for c in e["choices"]:
                if (c.get("delta") or {}).get("content"):
                    texts.append((made, c["delta"]["content"]))
        return texts

    async with httpx.AsyncClient(timeout=120, trust_env=False) as http:
        replies = await asyncio.gather(*(one(http, p) for p in prompts))
    assert len(replies) == 12
    for texts in replies:
        assert texts[0][0] == 1  # the first token's text came with it
        assert [made for made, _ in texts] == list(range(1, 121))  # one chunk of text per token


def test_a_restart_empties_llamacpps_prompt_cache_at_the_same_address(
    installed: tuple[LlamaCpp, Path], tmp_path: Path
) -> None:
    """The engine benchmark restarts llama.cpp before each arm: every arm replays the same
    prompts, and llama.cpp keeps prompts cached across requests (its slots, and its
    host-memory prompt cache), so without it every arm but the first would find its
    prompts evaluated already."""
    engine, model = installed
    prompt = " ".join(f"item {i} of the list is a word" for i in range(60))

    def evaluated(server: LlamaServer) -> float:  # prompt tokens the engine evaluated for one request
        before = metric(server.metrics(), "llamacpp:prompt_tokens_total")
        reply = httpx.post(f"{server.url}/v1/completions", json={"prompt": prompt, "max_tokens": 1}, timeout=60)
        assert reply.status_code == 200
        return metric(server.metrics(), "llamacpp:prompt_tokens_total") - before

    with running_llamacpp(LlamaSpec(model, parallel=2, ctx_size=2 * 4096), engine, tmp_path / "llama.log") as server:
        url, pid = server.url, server.proc.pid
        whole = evaluated(server)
        assert whole > 100
        assert evaluated(server) < whole / 4  # cached: the engine evaluates (almost) nothing again
        server.restart()
        assert server.url == url and server.proc.pid != pid
        assert evaluated(server) == whole  # a fresh start: the whole prompt again
    assert (tmp_path / "llama.log").read_text().count("listening on " + url) == 2  # one log, both starts
