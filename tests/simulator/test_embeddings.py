"""``/v1/embeddings`` in the simulator: deterministic unit vectors in OpenAI's shape."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from simulator.embeddings import DIMENSIONS, embed
from simulator.protocol import ApiError


def answer(body: Any, served: str = "e", latest: bool = False) -> dict:
    return orjson.loads(embed(orjson.dumps(body), served, implicit_latest=latest))


def test_each_input_gets_a_deterministic_unit_vector() -> None:
    first = answer({"model": "e", "input": ["hello world", "other"]})
    again = answer({"model": "e", "input": "hello world"})
    assert first["object"] == "list" and first["model"] == "e"
    assert [d["index"] for d in first["data"]] == [0, 1]
    vectors = [d["embedding"] for d in first["data"]]
    assert all(len(v) == DIMENSIONS and math.isclose(math.hypot(*v), 1.0, abs_tol=1e-5) for v in vectors)
    assert vectors[0] == again["data"][0]["embedding"] and vectors[0] != vectors[1]


@pytest.mark.parametrize(
    ("value", "vectors", "tokens"),
    [("abcdefgh", 1, 2), ("ab", 1, 1), ([1, 2, 3], 1, 3), ([[1, 2], [3]], 2, 3), (["abcd", "efghijkl"], 2, 3)],
)
def test_inputs_and_their_token_counts(value: Any, vectors: int, tokens: int) -> None:
    out = answer({"model": "e", "input": value})
    assert len(out["data"]) == vectors
    assert out["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


@pytest.mark.parametrize("value", ["", [], [1, "a"], [True], {"text": "x"}, None])
def test_a_bad_input_is_a_400(value: Any) -> None:
    with pytest.raises(ApiError) as caught:
        answer({"model": "e", "input": value})
    assert caught.value.status == 400 and caught.value.param == "input"


def test_unknown_models_and_bodies() -> None:
    with pytest.raises(ApiError) as caught:
        answer({"model": "x", "input": "a"})
    assert caught.value.status == 404
    assert answer({"model": "e", "input": "a"}, served="e:latest", latest=True)["model"] == "e"
    for raw in (b"{", b"[]"):
        with pytest.raises(ApiError) as bad:
            embed(raw, "e")
        assert bad.value.status == 400
