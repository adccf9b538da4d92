"""A loopback sidecar in front of a real engine that stops each reply at its true length.

An honest benchmark sends prompts only (no ``max_tokens``: the gateway must learn
lengths from what it relays), yet each reply must end at the length the real reply to
that prompt had. The simulator reads a length table for that; a real engine cannot, so
this proxy sits between whoever calls (a gateway, or the ``direct`` clients) and vLLM,
and sets ``max_tokens`` from the table (``loadtests/length_table.py``), keyed by the chat
request's last user message or the completions prompt, plus ``ignore_eos`` so random
weights never end a reply early (and ``skip_special_tokens: false``, so the text of a
reply re-encodes to the tokens generated). Every arm of a comparison, ``direct`` included, goes
through it, so it costs every arm the same.

Why a sidecar rather than a logits processor inside vLLM: it needs no engine plugin
(vLLM's plugin API moves between releases), works for any OpenAI-compatible engine, and
the gateway cannot read it: the table lives in this process only.

A continuation (the gateway resuming a paused stream: a final assistant message with
``continue_final_message``, or a completions prompt that extends a listed one) gets the
*rest* of its length: the true length less the tokens of the text so far, counted by the
engine's own ``/tokenize`` (vLLM's or llama.cpp's, ``--tokenize``). A continuation from
token ids (a completions prompt that is a listed request's prompt ids followed by the ids
made so far) is known by those ids: the start of a listed request's stream is read for
the ``prompt_token_ids`` vLLM sends when asked, and the rest is the length less the ids
that follow them; on llama.cpp (which tells no prompt ids) the continuation's prompt is the
prompt's text — a chat's as the engine renders it, which holds the listed user message —
followed by the ids made, and the rest is the length less those ids. Requests that match
no row pass through unchanged.

    python -m loadtests.engines.length_proxy --upstream URL --table FILE [--port P] [--tokenize vllm|llamacpp]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvicorn

from loadtests.length_table import read_length_table

Scope = dict[str, Any]
_PROMPT_IDS = re.compile(rb'"prompt_token_ids": ?\[([0-9, ]*)\]')


class LengthProxy:
    """The ASGI app: rewrites ``max_tokens`` of generation requests, relays everything else."""

    def __init__(self, upstream: str, lengths: dict[str, int], tokenize: str = "vllm") -> None:
        self.upstream = upstream.rstrip("/")
        self.lengths = lengths
        self.tokenize = tokenize  # whose /tokenize the engine serves: vllm or llamacpp
        self.by_ids: dict[tuple[int, ...], int] = {}  # a listed prompt's token ids (as the engine read it) -> length
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0),
                                        limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200))
        self.rewritten = 0
        self.unmatched = 0
        # each generation request's course, oldest first (bounded), to tell afterwards which hop
        # was late: (monotonic time, request number, "asked" with the max_tokens set (None: passed
        # through unchanged) | "ended" (the engine's answer ran out) | "left" (the caller left,
        # the engine's stream closed), then the bytes relayed by then)
        self.trace: deque[tuple[float, int, str, int | None]] = deque(maxlen=1000)
        self._numbers = itertools.count(1)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = (await receive())["type"]
                if event == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif event == "lifespan.shutdown":
                    await self.client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        first_of: int | None = None  # a listed request's first part: its length, to learn its prompt's ids
        number: int | None = None
        if scope["method"] == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            body, asked, first_of = await self.rewrite(path, body)
            number = next(self._numbers)
            self.trace.append((time.monotonic(), number, "asked", asked))
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"host", b"content-length")]
        request = self.client.build_request(scope["method"], self.upstream + path, content=body, headers=headers,
                                            params=scope.get("query_string", b"").decode())
        try:
            try:
                response = await self.client.send(request, stream=True)
            except (httpx.RemoteProtocolError, httpx.ConnectError):
                # a kept-alive connection the engine had just closed: nothing was read, send once more
                response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            await _answer(send, 502, orjson.dumps({"error": {"message": f"upstream: {exc}", "type": "proxy_error",
                                                               "param": None, "code": None}}))
            return
        relayed = [0]
        how = "left"
        try:
            how = await _relay_until_gone(response, receive, send, None if first_of is None else self._learner(first_of),
                                          relayed)
        finally:
            await response.aclose()  # closing the upstream response aborts the request in the engine
            if number is not None:
                self.trace.append((time.monotonic(), number, how, relayed[0]))

    def _learner(self, total: int) -> Callable[[bytes], bool]:
        """Reads the start of a listed request's stream for its prompt's token ids (vLLM's
        ``prompt_token_ids``, sent when the caller asked ``return_token_ids``), so that a
        continuation from token ids is known by them. True once done."""
        seen = bytearray()

        def read(chunk: bytes) -> bool:
            seen.extend(chunk)
            if (m := _PROMPT_IDS.search(seen)) is not None:
                ids = tuple(int(x) for x in m.group(1).split(b",") if x.strip())
                if ids:
                    self.by_ids[ids] = total
                return True
            return b"\n\n" in seen or len(seen) > 1 << 20  # the first event is past: none sent

        return read

    async def rewrite(self, path: str, raw: bytes) -> tuple[bytes, int | None, int | None]:
        """The body to send, the ``max_tokens`` it sets (None: passed through unchanged), and
        the listed length where it is a listed request's first part."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw, None, None
        if not isinstance(body, dict):
            return raw, None, None
        found = await self.remaining(path, body)
        if found is None:
            self.unmatched += 1
            return raw, None, None
        tokens, first = found
        self.rewritten += 1
        body["max_tokens"] = max(1, tokens)
        body.pop("max_completion_tokens", None)
        body["ignore_eos"] = True
        # special tokens stay in the text, so the text so far re-encodes to exactly the tokens
        # generated (the tiny model's word-level vocabulary round-trips; see tiny_model.py)
        body["skip_special_tokens"] = False
        return orjson.dumps(body), body["max_tokens"], tokens if first else None

    async def remaining(self, path: str, body: dict[str, Any]) -> tuple[int, bool] | None:
        """The tokens this request may still generate, and whether it is a listed request's
        first part (not a continuation of text or of token ids); None when it is not listed."""
        if path == "/v1/chat/completions":
            messages = body.get("messages") or []
            users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
            if not users or not isinstance(users[-1].get("content"), str):
                return None
            total = self.lengths.get(users[-1]["content"])
            last = messages[-1] if messages else {}
            if total is None:
                return None
            if not (body.get("continue_final_message") and last.get("role") == "assistant"):
                return total, True
            return total - await self.count(body.get("model"), str(last.get("content") or "")), False
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
            # a continuation from token ids: a listed prompt's ids, then the tokens made so far
            for ids, total in self.by_ids.items():
                if len(ids) <= len(prompt) and tuple(prompt[: len(ids)]) == ids:
                    return total - (len(prompt) - len(ids)), False
            return None
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) and all(
                isinstance(x, int) for x in prompt[1:]):
            # llama.cpp's continuation from token ids: the prompt's text, then the tokens made
            head, made = prompt[0], len(prompt) - 1
            total = self.lengths.get(head)
            if total is None:  # a chat prompt as the engine rendered it: the longest listed message in it
                inside = [(len(listed), t) for listed, t in self.lengths.items() if listed in head]
                total = max(inside)[1] if inside else None
            return None if total is None else (total - made, False)
        if not isinstance(prompt, str):
            return None
        if prompt in self.lengths:
            return self.lengths[prompt], True
        for listed, total in self.lengths.items():  # a continuation: the listed prompt + text so far
            if prompt.startswith(listed):
                return total - await self.count(body.get("model"), prompt[len(listed):]), False
        return None

    async def count(self, model: Any, text: str) -> int:
        """Tokens of ``text`` by the engine's own tokenizer (its ``/tokenize``)."""
        if not text:
            return 0
        if self.tokenize == "llamacpp":  # llama-server: {"content", "add_special"} -> {"tokens": [...]}
            resp = await self.client.post(f"{self.upstream}/tokenize", json={"content": text, "add_special": False})
            resp.raise_for_status()
            return len(resp.json()["tokens"])
        resp = await self.client.post(f"{self.upstream}/tokenize",
                                      json={"model": model, "prompt": text, "add_special_tokens": False})
        resp.raise_for_status()
        return int(resp.json()["count"])


async def _relay_until_gone(
    response: httpx.Response, receive: Any, send: Any, watch: Callable[[bytes], bool] | None = None,
    relayed: list[int] | None = None,
) -> str:
    """Relay the engine's answer until it ends (``"ended"``) or the caller leaves (``"left"``),
    whichever is first; ``relayed[0]`` counts the bytes sent on.

    Under uvicorn a ``send`` after the caller has gone returns quietly, so relaying alone
    would keep reading the engine's stream to its end and the generation would run on
    inside the engine: the caller's leaving is read from ``http.disconnect`` instead (a
    gateway pausing a stream closes it, and the engine must stop generating then)."""

    async def relay() -> None:
        out = [(k, v) for k, v in response.headers.raw if k.lower() not in (b"content-length", b"transfer-encoding")]
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        reading = watch
        async for chunk in response.aiter_raw():
            if reading is not None and reading(chunk):
                reading = None
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if relayed is not None:
                relayed[0] += len(chunk)
        await send({"type": "http.response.body", "body": b""})

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    relaying, leaving = asyncio.ensure_future(relay()), asyncio.ensure_future(gone())
    try:
        await asyncio.wait({relaying, leaving}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (relaying, leaving):
            task.cancel()
        results = await asyncio.gather(relaying, leaving, return_exceptions=True)
    error = results[0]
    if isinstance(error, BaseException) and not isinstance(error, (asyncio.CancelledError, OSError)):
        raise error  # OSError: the caller left while a chunk was on its way
    return "ended" if error is None else "left"  # a cancelled relay's result is its CancelledError


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True, help="the engine's base URL")
    parser.add_argument("--table", type=Path, required=True, help="JSON lines of {prompt, output_tokens}")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokenize", choices=("vllm", "llamacpp"), default="vllm",
                        help="the engine's /tokenize dialect (default vllm)")
    args = parser.parse_args(argv)
    app = LengthProxy(args.upstream, read_length_table(args.table), args.tokenize)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
