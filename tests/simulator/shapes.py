"""A response's shape, to compare the simulator's dialects with the engines they copy: each
chunk's keys in order, each value's type (lists of ints, such as token ids, as ``"ints"``),
runs of chunks of one shape as one."""

from __future__ import annotations

from typing import Any

import httpx
import orjson


def shape(value: Any) -> str:
    """``{"id":"x","n":[1,2],"u":null}`` -> ``{id:str,n:ints,u:null}``."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{shape(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        if value and all(isinstance(v, int) for v in value):
            return "ints"
        return "[" + ",".join(shape(v) for v in value) + "]"
    return "null" if value is None else type(value).__name__


def response_shape(body: bytes) -> list[str]:
    """A whole answer's shape, or a stream's: its chunks' (one per run of a shape), then DONE."""
    if not body.startswith(b"data:"):
        return [shape(orjson.loads(body))]
    out: list[str] = []
    for line in body.splitlines():
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        s = "DONE" if payload == b"[DONE]" else shape(orjson.loads(payload))
        if not out or out[-1] != s:
            out.append(s)
    return out


async def answered_shapes(url: str, model: str, cases: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, list[str]]:
    """What a server at ``url`` answers to each of ``cases`` (name -> path, body less the model), as shapes.

    Each case on a connection of its own: a server may close a connection after a streamed
    answer (llama-server did, now and then), and a request sent on it before the close
    arrives fails with "Server disconnected" — a property of the client's pooling, not of
    the shapes compared here (the gateway's own transport sends such a request again)."""
    got = {}
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=120, trust_env=False, limits=limits) as http:
        for name, (path, body) in cases.items():
            r = await http.post(path, json={**body, "model": model})
            assert r.status_code == 200, r.text
            got[name] = response_shape(r.content)
    return got
