"""A response's shape, to compare the simulator's dialects with the engines they copy: each
chunk's keys in order, each value's type (lists of ints, such as token ids, as ``"ints"``),
runs of chunks of one shape as one."""

from __future__ import annotations

from typing import Any

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
