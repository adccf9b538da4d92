"""The shapes of vLLM's responses (``shapes.py``), to compare the simulator's ``vllm`` dialect
with the real engine. ``vllm-0.32-shapes.json`` holds what vLLM 0.32.0 (CPU build) answered
to ``CASES``; ``tests/engines/test_vllm_shapes.py`` asks a running vLLM again."""

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


def recorded() -> dict[str, list[str]]:
    return orjson.loads(FIXTURE.read_bytes())
