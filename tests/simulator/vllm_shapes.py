"""The shapes of vLLM's responses, to compare the simulator's ``vllm`` dialect with the real
engine: each chunk's keys in order, each value's type (token id lists as ``"ints"``), runs of
chunks of one shape as one. ``vllm-0.32-shapes.json`` holds what vLLM 0.32.0 (CPU build)
answered to ``CASES``; ``tests/engines/test_vllm.py`` asks a running vLLM again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

FIXTURE = Path(__file__).with_name("data") / "vllm-0.32-shapes.json"
MESSAGES = [{"role": "user", "content": "Tell me about queues."}]
PROMPT = "Tell me about queues."


def _cases() -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for ep, path, ask in (("chat", "/v1/chat/completions", {"messages": MESSAGES}),
                          ("cmpl", "/v1/completions", {"prompt": PROMPT})):  # fmt: skip
        for ids in (False, True):
            for options in (None, {"include_usage": True}, {"include_usage": True, "continuous_usage_stats": True}):
                body = {**ask, "stream": True, "max_tokens": 4, "ignore_eos": True}
                if options:
                    body["stream_options"] = options
                if ids:
                    body["return_token_ids"] = True
                usage = "none" if not options else "running" if "continuous_usage_stats" in options else "usage"
                out[f"{ep}-stream-ids{int(ids)}-{usage}"] = (path, body)
            body = {**ask, "max_tokens": 4, "ignore_eos": True} | ({"return_token_ids": True} if ids else {})
            out[f"{ep}-whole-ids{int(ids)}"] = (path, body)
    return out


CASES = _cases()  # name -> (path, body less "model"): finished by length, every one


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


def recorded() -> dict[str, list[str]]:
    return orjson.loads(FIXTURE.read_bytes())
