"""Requests to a real engine, the same for every engine's tests: bodies (exact lengths with
``ignore_eos``), a stream read whole, its events and its text."""

from __future__ import annotations

from typing import Any, Protocol

import httpx
import orjson


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
