"""Requests to a real engine, the same for every engine's tests: bodies (exact lengths with
``ignore_eos``), a stream read whole, its events and its text."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import httpx
import orjson
from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys
from tests.support import busy_is, eventually

T = TypeVar("T")


class Served(Protocol):
    model: str


def chat(server: Served, tokens: int, stream: bool, usage: bool | None = None, text: str = "Hello") -> dict:
    body: dict[str, Any] = {"model": server.model, "messages": [{"role": "user", "content": text}],
                            "max_tokens": tokens, "ignore_eos": True, "stream": stream}
    if usage is not None:
        body["stream_options"] = {"include_usage": usage}
    return body


def completion(server: Served, tokens: int, stream: bool, usage: bool | None = None, text: str = "Once") -> dict:
    body: dict[str, Any] = {"model": server.model, "prompt": text, "max_tokens": tokens, "ignore_eos": True,
                            "stream": stream}
    if usage is not None:
        body["stream_options"] = {"include_usage": usage}
    return body


def path_of(body: dict) -> str:
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"


def events(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join((c.get("delta") or {}).get("content") or c.get("text") or "" for e in chunks for c in e["choices"])


async def stream(http: httpx.AsyncClient, url: str, body: dict, headers: dict[str, str] | None = None) -> bytes:
    async with http.stream("POST", f"{url}{path_of(body)}", json=body, headers=headers or {}) as resp:
        assert resp.status_code == 200, await resp.aread()
        return b"".join([chunk async for chunk in resp.aiter_raw()])


def chunk_fields(chunks: list[dict[str, Any]]) -> list[bytes]:
    """Each chunk less its id, created and content; runs of equal content chunks as one.
    Where one chunk ends and the next begins is an engine's own timing (vLLM's server
    merges tokens into one chunk when it falls behind), so two streams of the same tokens
    are compared by this and their text whole."""
    out: list[bytes] = []
    for e in chunks:
        choices = [{k: ({**v, "content": bool(v.get("content"))} if k == "delta" else bool(v) if k == "text" else v)
                    for k, v in c.items()} for c in e["choices"]]
        shape = orjson.dumps({k: v for k, v in e.items() if k not in ("id", "created", "choices")} | {"choices": choices},
                             option=orjson.OPT_SORT_KEYS)
        if not out or out[-1] != shape:
            out.append(shape)
    return out


async def resumes(http: httpx.AsyncClient, gateway: str) -> dict[str, int]:
    """The gateway's resumes so far, by what they carried (``triage_resumes_total``)."""
    out: dict[str, int] = {}
    for line in (await http.get(f"{gateway}/metrics")).text.splitlines():
        if line.startswith("triage_resumes_total{"):
            how = line.split('triage_resume_from="', 1)[1].split('"', 1)[0]
            out[how] = out.get(how, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


async def granted_or_ended(start: Callable[[], Awaitable[T]], redis: Redis, keys: PoolKeys, backend: str,
                           within_s: float) -> asyncio.Task[T]:
    """Start the victim (``start()``) once ``backend``'s one slot is free, and wait until it
    holds that slot, or has ended (nothing to pause); the victim's task. The slot must be
    free first: a request just answered (an earlier try's, or one that taught the gateway
    an answer's shape) gives its slot back after its client has the answer, and the busy
    count of 1 read then would be that request's. The short request sent next could then
    take the slot before the victim and never queue behind it."""
    await eventually(lambda: busy_is(redis, keys, 0, backend), within_s=within_s)
    victim = asyncio.create_task(start())
    await eventually(lambda: victim.done() or busy_is(redis, keys, 1, backend), within_s=within_s)
    return victim


async def paused_whole(
    http: httpx.AsyncClient, url: str, body: dict, short: dict, redis: Redis, keys: PoolKeys,
    headers: tuple[dict[str, str], dict[str, str]], tries: int, within_s: float, backend: str,
) -> tuple[httpx.Response, bytes, dict[bytes, bytes], list[dict[str, Any]]]:
    """A non-streamed ``body`` (the victim) and, once it holds the slot, the stream
    ``short``, queued behind it: the dispatch pauses the victim as soon as it may (past the
    quantum), whenever the test gets to look. Again, up to ``tries`` times, while the victim
    was not paused and resumed: it can still end first (an engine's server starved of CPU
    may hand over the whole reply at once), or the pause can reach the gateway after the
    victim's reply has all come in (then there is nothing left to resume, and the pause
    only gave its slot to the short request). A try that paused without a resume is not
    counted in the stats returned. ``headers``: the victim's, the short request's. The
    victim's answer, the short stream, the pool's stats, and what each try saw (for a
    failure's message). ``backend``: the name of the pool's one backend."""
    path = path_of(body)
    seen: list[dict[str, Any]] = []
    for _ in range(tries):
        resumed_before = sum((await resumes(http, url)).values())
        began = time.monotonic()
        victim = await granted_or_ended(lambda: http.post(f"{url}{path}", json=body, headers=headers[0]),
                                        redis, keys, backend, within_s)
        ended_first = victim.done()
        granted_s = time.monotonic() - began
        streamed = await stream(http, url, short, headers[1])
        short_s = time.monotonic() - began
        answer = await victim
        stats = await redis.hgetall(keys.stats)
        resumed = sum((await resumes(http, url)).values()) - resumed_before
        usage = answer.json().get("usage") if answer.status_code == 200 else answer.text[:300]
        # seconds from the victim's start: when the test saw it granted, when the short one ended, when it ended
        seen.append({"victim_ended_before_short": ended_first, "stats": stats, "resumed": resumed,
                     "victim": (answer.status_code, usage), "times_s": (round(granted_s, 3), round(short_s, 3),
                                                                         round(time.monotonic() - began, 3))})
        await redis.delete(keys.progress)
        if resumed > 0:
            break
        await redis.hdel(keys.stats, "paused")
    return answer, streamed, stats, seen
