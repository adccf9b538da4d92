"""The gateway in front of a real vLLM: what the simulator only imitates, checked against
the engine itself (its CPU build, a tiny random-weight model, one server for the folder).

Bodies carry ``ignore_eos`` (a vLLM extension the gateway passes through): random weights
would otherwise stop at the end-of-sequence token about once in 4,096 sampled tokens, and
every length asserted here is exact.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from loadtests.engines.vllm import VllmServer, metric
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
from tests.engines.conftest import FILL_TOKENS, MAX_IN_ENGINE, MAX_NUM_SEQS, ONE_SLOT, PAUSING
from tests.support import eventually

LONG = {"x-triage-expected-tokens": "2000"}  # predicted long: lowest engine priority, may be paused
SHORT = {"x-triage-expected-tokens": "5"}


async def engine_metric(vllm: VllmServer, name: str, **labels: str) -> float:
    # verify=False: plain HTTP on loopback, and no TLS context to build; with one, each new
    # client loads the CA bundle (about 70 ms of CPU), which at ten reads a second took most
    # of a core from this process, the gateway's thread included
    async with httpx.AsyncClient(timeout=10, verify=False) as http:
        text = (await http.get(f"{vllm.url}/metrics")).text
    from loadtests.engines.vllm import parse_metrics

    return metric(parse_metrics(text), name, **labels)


async def on_engine(condition: Callable[[], Awaitable[bool]], within_s: float) -> None:
    """``eventually`` for a condition read from vLLM's ``/metrics``: each read costs its API
    server (the process that also streams every token) a page render, so it is read ten
    times a second, not a hundred. A read that fails (the API server, busy with a burst of
    new requests, once took over 10 s to accept a connection on a 2-core machine) tells
    nothing of the state: it is read again, within the same bound."""

    async def read() -> bool:
        try:
            return await condition()
        except httpx.TransportError:
            return False

    await eventually(read, within_s=within_s, every_s=0.1)


async def engine_idle(vllm: VllmServer) -> bool:
    running = await engine_metric(vllm, "vllm:num_requests_running")
    return running == 0 and await engine_metric(vllm, "vllm:num_requests_waiting") == 0


VICTIM_TOKENS = 1000  # long enough that it cannot end before the short request is queued (8 s or more here)


@pytest.mark.parametrize("make", [chat, completion], ids=["chat", "completions"])
async def test_non_streamed_requests_pass_through_with_usage(
    vllm: VllmServer, engine_gateway: Callable[..., str], make: Callable[..., dict]
) -> None:
    url = engine_gateway()
    async with httpx.AsyncClient(timeout=120) as http:
        resp = await http.post(f"{url}{path_of(make(vllm, 1, False))}", json=make(vllm, 12, False))
    assert resp.status_code == 200
    body = resp.json()
    assert body["model"] == vllm.model and body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 12 and body["usage"]["prompt_tokens"] > 0
    assert (body["choices"][0].get("message") or {}).get("content") or body["choices"][0].get("text")


@pytest.mark.parametrize("make", [chat, completion], ids=["chat", "completions"])
@pytest.mark.parametrize("usage", [None, False, True], ids=["no-options", "usage-off", "usage-on"])
async def test_streams_pass_through_and_usage_is_kept_only_when_asked(
    vllm: VllmServer, engine_gateway: Callable[..., str], make: Callable[..., dict], usage: bool | None
) -> None:
    url = engine_gateway()
    async with httpx.AsyncClient(timeout=120) as http:
        raw = await stream(http, url, make(vllm, 10, True, usage))
    chunks = events(raw)
    assert raw.endswith(b"data: [DONE]\n\n") and text_of(chunks)
    with_usage = [e["usage"] for e in chunks if e.get("usage")]
    if usage:
        assert len(with_usage) == 1 and with_usage[0]["completion_tokens"] == 10
    else:  # the gateway asked vLLM for usage (to count tokens) and strips it again
        assert with_usage == []
    finishes = [c["finish_reason"] for e in chunks for c in e["choices"] if c.get("finish_reason")]
    assert finishes == ["length"]


@pytest.mark.parametrize("make", [chat, completion], ids=["chat", "completions"])
async def test_a_stream_that_may_be_paused_reaches_the_client_as_vllm_sends_it(
    vllm: VllmServer, engine_gateway: Callable[..., str], make: Callable[..., dict]
) -> None:
    """A stream on a backend that can resume asks vLLM for its running token count
    (``continuous_usage_stats``) and cuts it out of every chunk again: the client gets
    the chunks vLLM sends a client that did not ask (greedy, so the same text). Where one
    chunk ends and the next begins is vLLM's own timing (its server merges tokens into one
    chunk when it falls behind, in either stream), so chunks are compared by their fields
    with the content taken out, and the text whole."""
    url = engine_gateway({"resume": "vllm"}, preempt=True)
    body = make(vllm, 24, True, None, "the same words") | {"temperature": 0}
    async with httpx.AsyncClient(timeout=120) as http:
        through = events(await stream(http, url, body))
        direct = events(await stream(http, vllm.url, body))

    assert chunk_fields(through) == chunk_fields(direct) and not any("usage" in e for e in through)
    assert text_of(through) == text_of(direct) and len(text_of(through)) > 0


async def test_a_client_that_disconnects_aborts_the_request_in_vllm(
    vllm: VllmServer, engine_gateway: Callable[..., str]
) -> None:
    """The client leaves at its first content token (httpx closes the connection as soon as
    the iteration stops), the gateway closes its stream to vLLM, and vLLM aborts the request.
    vLLM 0.32 counts a frontend abort in no counter (``request_success_total`` has an
    ``abort`` label only for aborts inside the engine), so its metrics show it this way: the
    request leaves the engine, no request finished, and fewer than the tokens asked were
    generated.

    The abort can be quicker than any poll of ``/metrics``, so the test waits on no state of
    the request in between: vLLM sets ``num_requests_running`` in the same pass that hands a
    token to the stream, before the client can have read it, so an idle engine after the first
    token is the request gone. How many tokens it made before the abort landed is speed (a
    busy machine notices the client's leaving later), not behaviour: it is not bounded here
    beyond "fewer than asked"."""
    url = engine_gateway()
    await on_engine(lambda: engine_idle(vllm), within_s=60)
    finished = await engine_metric(vllm, "vllm:request_success_total")
    generated = await engine_metric(vllm, "vllm:generation_tokens_total")
    async with httpx.AsyncClient(timeout=120) as http:
        async with http.stream("POST", f"{url}/v1/chat/completions", json=chat(vllm, FILL_TOKENS, True)) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: {") and text_of([orjson.loads(line[6:])]):
                    break  # the first content: vLLM is generating; now the client leaves

    await on_engine(lambda: engine_idle(vllm), within_s=60)
    assert await engine_metric(vllm, "vllm:request_success_total") == finished  # none ran to its end
    made = await engine_metric(vllm, "vllm:generation_tokens_total") - generated
    assert 0 < made < FILL_TOKENS, made


async def test_the_adaptive_limit_reads_vllms_metrics(vllm: VllmServer, engine_gateway: Callable[..., str]) -> None:
    """The engine's queue, read from its ``/metrics``, cuts the limit. The latency targets are
    off (only the engine's queue is under test here)."""
    url = engine_gateway({"max_concurrency": MAX_IN_ENGINE, "adaptive": True}, ttft_target_s=None, tpot_target_s=None)
    await on_engine(lambda: engine_idle(vllm), within_s=60)
    async with httpx.AsyncClient(timeout=300) as http:
        # long enough that none ends (and the engine's queue moves) before the view is read
        runs = [asyncio.create_task(stream(http, url, chat(vllm, FILL_TOKENS, True, text=f"story {i}")))
                for i in range(MAX_IN_ENGINE)]

        async def view() -> dict[str, Any]:
            return (await http.get(f"{url}/admin/backends")).json()["backends"][0]

        async def sees_the_engine_queue() -> bool:  # vLLM's running/waiting, as the gateway read them
            engine = (await view())["engine"]
            return engine["running"] == MAX_NUM_SEQS and engine["waiting"] == MAX_IN_ENGINE - MAX_NUM_SEQS

        try:
            await on_engine(sees_the_engine_queue, within_s=120)
        except AssertionError:  # what each side saw, to find out why
            seen = {"gateway": await view(), "vllm_running": await engine_metric(vllm, "vllm:num_requests_running"),
                    "vllm_waiting": await engine_metric(vllm, "vllm:num_requests_waiting"),
                    "clients_ended": [r.done() for r in runs]}
            await tasks.stop(runs)
            raise AssertionError(f"the gateway never saw vLLM queueing: {seen}") from None

        async def limit_cut() -> bool:
            v = await view()
            return v["limit"] < MAX_IN_ENGINE and v["limit_reason"] == "engine is queueing"

        await eventually(limit_cut, within_s=60)
        await tasks.stop(runs)  # the clients leave (asked again should a cancellation be lost)
    await on_engine(lambda: engine_idle(vllm), within_s=60)


async def test_a_full_vllm_queue_is_absorbed_by_the_gateway_queue(
    vllm: VllmServer, engine_gateway: Callable[..., str]
) -> None:
    """vLLM answers 503 past --max-num-queued-reqs; the gateway holds the request and retries
    it from its own queue, so every client request succeeds. Another client of the engine
    fills it first (four long requests running, two waiting), so the gateway's calls meet a
    full queue whatever the machine's speed; once those leave, the held requests are served."""
    clients = MAX_IN_ENGINE
    url = engine_gateway({"max_concurrency": clients, "adaptive": False})
    await on_engine(lambda: engine_idle(vllm), within_s=60)
    rejected = await engine_metric(vllm, "vllm:admission_rejections_total", reason="max_num_queued_reqs")
    async with httpx.AsyncClient(timeout=300) as http:
        fill = [asyncio.create_task(stream(http, vllm.url, chat(vllm, FILL_TOKENS, True, text=f"other {i}")))
                for i in range(MAX_IN_ENGINE)]
        await on_engine(lambda: _running_is(vllm, MAX_NUM_SEQS), within_s=120)
        await on_engine(lambda: _waiting_is(vllm, MAX_IN_ENGINE - MAX_NUM_SEQS), within_s=60)
        body = chat(vllm, 20, False)
        answers = [asyncio.create_task(http.post(f"{url}/v1/chat/completions", json=body)) for _ in range(clients)]

        async def refused() -> bool:
            now = await engine_metric(vllm, "vllm:admission_rejections_total", reason="max_num_queued_reqs")
            return now > rejected

        async def refused_or_answered() -> bool:
            return any(a.done() for a in answers) or await refused()

        try:
            await on_engine(refused_or_answered, within_s=120)
        except AssertionError:  # what each side saw, to find out why
            seen = {"gateway": (await http.get(f"{url}/admin/backends")).json()["backends"][0],
                    "vllm_running": await engine_metric(vllm, "vllm:num_requests_running"),
                    "vllm_waiting": await engine_metric(vllm, "vllm:num_requests_waiting"),
                    "fills_ended": [f.done() for f in fill]}
            await tasks.stop(fill + answers)
            raise AssertionError(f"vLLM refused none of the gateway's requests: {seen}") from None
        early = [repr(a.exception()) if a.exception() else (a.result().status_code, a.result().text[:200])
                 for a in answers if a.done()]
        assert not early, early  # held by the gateway, not answered with vLLM's 503 (nor another error)
        await tasks.stop(fill)
        done = await asyncio.gather(*answers)
    statuses = sorted(a.status_code for a in done)
    assert statuses == [200] * clients, [a.text for a in done if a.status_code != 200][:1]
    await on_engine(lambda: engine_idle(vllm), within_s=60)


@pytest.mark.parametrize("engine_priority", [True, False], ids=["engine-priority", "fcfs-order"])
async def test_engine_priority_orders_vllms_own_queue(
    vllm: VllmServer, engine_gateway: Callable[..., str], engine_priority: bool
) -> None:
    """A long request, then a short one, wait in vLLM's own queue; with ``engine_priority``
    the gateway's order reaches vLLM as ``priority`` (the server runs ``--scheduling-policy
    priority``) and the short one starts first; without it vLLM sees equal priorities and
    keeps arrival order.

    Every state waited for is held by construction, whatever the machine's speed. Another
    client of the engine (the test, straight to vLLM) fills its batch with four requests
    that cannot end during the test. The gateway's limit is then free, so it forwards each
    of the two as it arrives; the short one is sent once vLLM shows the long one waiting.
    The two cannot end during the test either: once a fill is ended, the one vLLM picks
    holds the freed slot, and the other starts only when the test ends a second fill, so
    the order the test sees their first tokens in is the order vLLM started them. (Two that
    end by themselves, or at their first token, let the other start unasked: a wait for
    "exactly one started" could then miss its moment, and a test that lags behind vLLM
    could read both first tokens at once, in either order.)"""
    url = engine_gateway({"max_concurrency": MAX_IN_ENGINE, "adaptive": False, "engine_priority": engine_priority})
    await on_engine(lambda: engine_idle(vllm), within_s=60)
    started: list[str] = []

    async def first_token(name: str, body: dict, headers: dict[str, str]) -> None:
        """Note when the first content arrives, then read on: the request keeps its slot."""
        async with http.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as resp:
            assert resp.status_code == 200, await resp.aread()
            async for line in resp.aiter_lines():
                if name not in started and line.startswith("data: {") and text_of([orjson.loads(line[6:])]):
                    started.append(name)

    runs: list[asyncio.Task[Any]] = []  # every request the test sends
    live: list[asyncio.Task[Any]] = []  # those the test has not ended

    def send(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        runs.append(asyncio.create_task(work))
        live.append(runs[-1])
        return runs[-1]

    async def end(run: asyncio.Task[Any]) -> None:
        """The client leaves: vLLM aborts the request and its slot frees."""
        live.remove(run)
        await tasks.stop([run])

    def none_ended() -> None:  # one that ended says why here, not as a wait that runs out
        for run in live:
            if run.done():
                said = run.exception() or (run.result() or b"")[-600:]
                raise AssertionError(f"a request ended before the test ended it, {time.monotonic() - began:.1f} s "
                                     f"into the test, after: {said!r}")

    async def shows(gauge: str, n: int) -> bool:
        none_ended()
        return await engine_metric(vllm, gauge) == n

    def started_are(n: int) -> bool:
        none_ended()
        return len(started) == n

    running, waiting = "vllm:num_requests_running", "vllm:num_requests_waiting"
    began = time.monotonic()
    async with httpx.AsyncClient(timeout=300) as http:
        try:
            fill = [send(stream(http, vllm.url, chat(vllm, FILL_TOKENS, True, text=f"fill {i}")))
                    for i in range(MAX_NUM_SEQS)]
            await on_engine(lambda: shows(running, MAX_NUM_SEQS), within_s=120)
            send(first_token("long", chat(vllm, FILL_TOKENS, True, text="long"), LONG))
            await on_engine(lambda: shows(waiting, 1), within_s=60)
            send(first_token("short", chat(vllm, FILL_TOKENS, True, text="short"), SHORT))
            await on_engine(lambda: shows(waiting, 2), within_s=60)
            assert started == []  # both wait in vLLM's queue, behind a batch that cannot move
            await end(fill[0])  # one slot frees: vLLM's scheduler picks one of the two waiting
            await eventually(lambda: started_are(1), within_s=120)
            await end(fill[1])  # only now may the other start
            await eventually(lambda: started_are(2), within_s=120)
        finally:  # passed or not: no request of this test is left in the engine
            await tasks.stop(runs)
    assert started == (["short", "long"] if engine_priority else ["long", "short"])
    await on_engine(lambda: engine_idle(vllm), within_s=60)


async def _running_is(vllm: VllmServer, n: int) -> bool:
    return await engine_metric(vllm, "vllm:num_requests_running") == n


async def _waiting_is(vllm: VllmServer, n: int) -> bool:
    return await engine_metric(vllm, "vllm:num_requests_waiting") == n


@pytest.mark.parametrize("make", [chat, completion], ids=["chat", "completions"])
async def test_a_paused_stream_resumes_on_vllm_to_the_length_asked(
    vllm: VllmServer, engine_gateway: Callable[..., str], engine_redis: Redis, prefix: str,
    make: Callable[..., dict],
) -> None:
    """A long stream holding the only slot is paused for a short request, then resumed by
    vLLM itself (``continue_final_message`` on chat, prompt + text on completions). Under
    greedy decoding the client gets what an unpaused stream of the same request gets: the
    same text, one role chunk, one finish, the same usage. (Where chunks begin and end is
    vLLM's own timing — it merges tokens when its server falls behind — in both.)"""
    url = engine_gateway(ONE_SLOT, **PAUSING)
    keys = PoolKeys(prefix, "default")
    await on_engine(lambda: engine_idle(vllm), within_s=60)
    async with httpx.AsyncClient(timeout=600) as http:
        body = make(vllm, VICTIM_TOKENS, True, True, "a long story") | {"temperature": 0}
        tries: list[dict[str, Any]] = []  # what each try saw, should the pause be missing
        # The short request is queued behind the victim as soon as the victim holds the
        # slot, so the dispatch pauses it the moment it passes the quantum, however late the
        # test looks. vLLM's API server, starved of CPU, can still hand over thousands of
        # tokens in one chunk: the victim may then end before it is seen past the quantum,
        # and nothing is left to pause. Once more then.
        for _ in range(3):
            victim = await granted_or_ended(lambda: stream(http, url, body, LONG), engine_redis, keys, "vllm",
                                            within_s=120)
            seen: dict[str, Any] = {"victim_ended_before_short": victim.done()}
            short = await stream(http, url, make(vllm, 5, True, True, "quick"), SHORT)
            seen["progress"] = await engine_redis.hgetall(keys.progress)
            seen["victim_ended_with_short"] = victim.done()
            raw = await victim
            seen["pool_stats"] = await engine_redis.hgetall(keys.stats)  # why no pause, if none
            seen["resume_cost"] = await engine_redis.hgetall(keys.costs)
            tries.append(seen)
            await engine_redis.delete(keys.progress)
            if b": paused" in raw:
                break
        resumed = await resumes(http, url)
        unpaused = events(await stream(http, vllm.url, body))  # the same request, straight to vLLM
    assert events(short)[-1]["usage"]["completion_tokens"] == 5
    assert b": paused" in raw and raw.endswith(b"data: [DONE]\n\n"), tries
    chunks = events(raw)
    assert len({e["id"] for e in chunks}) == 1
    finishes = [c["finish_reason"] for e in chunks for c in e["choices"] if c.get("finish_reason")]
    assert finishes == ["length"]
    usage = [e["usage"] for e in chunks if e.get("usage")]
    assert len(usage) == 1 and usage[0]["completion_tokens"] == VICTIM_TOKENS  # both parts, summed
    if make is chat:
        assert sum(1 for e in chunks for c in e["choices"] if (c.get("delta") or {}).get("role")) == 1
    assert text_of(chunks) == text_of(unpaused) and len(text_of(chunks)) > 0
    assert usage == [e["usage"] for e in unpaused if e.get("usage")]  # prompt tokens too: the original's
    assert chunks[-1].get("system_fingerprint") == unpaused[-1].get("system_fingerprint")
    # resumed from the token ids (the prompt's and those made): vLLM's chunks, its fields
    assert resumed == {"token_ids": 1}
    assert chunk_fields(chunks) == chunk_fields(unpaused)


@pytest.mark.parametrize("make", [chat, completion], ids=["chat", "completions"])
async def test_a_paused_whole_request_gets_vllms_own_answer(
    vllm: VllmServer, engine_gateway: Callable[..., str], engine_redis: Redis, prefix: str,
    make: Callable[..., dict],
) -> None:
    """A client that does not stream, on vLLM: streamed upstream, paused for a short
    request, resumed, and answered with the JSON vLLM gives the same request unpaused
    (greedy): every field vLLM writes, this request's values."""
    url = engine_gateway(ONE_SLOT, **PAUSING)
    keys = PoolKeys(prefix, "default")
    body = make(vllm, VICTIM_TOKENS, False, None, "a long story") | {"temperature": 0}
    path = path_of(body)
    await on_engine(lambda: engine_idle(vllm), within_s=60)
    async with httpx.AsyncClient(timeout=600) as http:
        taught = await http.post(f"{url}{path}", json=make(vllm, 3, False), headers=SHORT)
        assert taught.status_code == 200  # its first plain answer: vLLM's shape
        # the short request waits behind the victim; a victim that ends before the pause
        # reaches it (vLLM's starved API server can hand over a whole reply at once) is tried
        # again (paused_whole)
        answer, short, stats, tries = await paused_whole(
            http, url, body, make(vllm, 5, True, True, "quick"), engine_redis, keys, (LONG, SHORT), tries=3,
            within_s=120, backend="vllm",
        )
        unpaused = (await http.post(f"{vllm.url}{path}", json=body)).json()
        resumed = await resumes(http, url)
    assert events(short)[-1]["usage"]["completion_tokens"] == 5
    assert answer.status_code == 200 and stats.get(b"paused") == b"1", repr(tries)
    got = answer.json()
    assert resumed == {"token_ids": 1}, repr(tries)
    assert list(got) == list(unpaused)  # vLLM's fields, in its order
    assert {k: v for k, v in got.items() if k not in ("id", "created")} == {
        k: v for k, v in unpaused.items() if k not in ("id", "created")
    }
