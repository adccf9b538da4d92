"""``POST /v1/embeddings``: deterministic vectors in OpenAI's shape, answered at once.

Enough for a gateway to route, queue and pass through an embeddings request: each
input gets a unit vector of ``DIMENSIONS`` floats seeded by its text, and usage counts
its tokens by the simulator's estimate (four characters a token). No engine time is
spent: embedding is one short forward pass on a real server.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson

from simulator.protocol import ApiError

DIMENSIONS = 8


def _vector(item: str | list[int]) -> list[float]:
    seed = hashlib.sha256(orjson.dumps(item)).digest()
    raw = [(b - 127.5) / 127.5 for b in seed[:DIMENSIONS]]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [round(x / norm, 6) for x in raw]


def _inputs(value: Any) -> list[str | list[int]]:
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return list(value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [list(value)]
        if all(isinstance(v, list) and all(isinstance(t, int) for t in v) for v in value):
            return list(value)
    raise ApiError(400, "'input' must be a non-empty string, array of strings, or array of token ids.", param="input")


def _tokens(item: str | list[int]) -> int:
    return len(item) if isinstance(item, list) else max(1, len(item) // 4)


def embed(raw: bytes, served_model: str, implicit_latest: bool = False) -> bytes:
    """The response body for one embeddings request. Raises ``ApiError``."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError(400, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    model = body.get("model")
    if model != served_model and not (implicit_latest and f"{model}:latest" == served_model):
        raise ApiError(404, f"The model `{model}` does not exist.", type="NotFoundError", param="model",
                       code="model_not_found")
    items = _inputs(body.get("input"))
    data = [{"object": "embedding", "index": i, "embedding": _vector(item)} for i, item in enumerate(items)]
    tokens = sum(_tokens(item) for item in items)
    return orjson.dumps({
        "object": "list", "data": data, "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })
