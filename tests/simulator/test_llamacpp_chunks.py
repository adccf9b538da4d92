"""The simulator's ``llamacpp`` dialect writes llama-server's chunks: its fields in its order,
each token's id in ``logprobs`` when ``n_probs`` asks, ``timings``, and a mixed prompt (a
chat prompt rendered by ``/apply-template``, or a completions prompt, followed by the output's
ids) read as the continuation it is — so the gateway's token-id resume runs on it as on
llama.cpp. The recorded chunks are llama-server's own, from ``tests/gateway/request/test_token_ids.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.request import token_ids
from gateway.request.resume import Transcript
from simulator.llamacpp_chunks import timings, usage
from simulator.protocol import FinishReason
from simulator.sequence import Sequence
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from simulator.textgen import Vocabulary
from simulator.token_ids import word_id
from tests.gateway.request.test_token_ids import CMPL, CMPL_LAST, ROLE, WORD_IDS
from tests.simulator.conftest import MODEL
from tests.simulator.llamacpp_shapes import CASES as SHAPE_CASES
from tests.simulator.llamacpp_shapes import recorded as recorded_shapes
from tests.simulator.shapes import response_shape
from tests.simulator.test_resume import chat_content_of_length, completion_prompt_of_length

VOCAB = Vocabulary()
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
ASK_IDS = {"n_probs": 1, "post_sampling_probs": True, "timings_per_token": True}  # what the gateway asks


@pytest.fixture(scope="module")
def llama_url() -> Iterator[str]:
    with running_simulator(SimSettings(profile="fast", model=MODEL, dialect="llamacpp")) as url:
        yield url


@pytest.fixture
async def llama(llama_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=llama_url, timeout=30) as client:
        yield client


def test_timings_and_usage_count_what_the_prefix_cache_held_apart() -> None:
    seq = Sequence(40, 10, FinishReason.LENGTH, streamed=True, arrival=0.0)
    seq.prefill_computed, seq.scheduled_at, seq.first_token_at, seq.last_token_at = 8, 1.0, 1.5, 2.5
    t = timings(seq, 5)
    assert (t["cache_n"], t["prompt_n"], t["predicted_n"]) == (32, 8, 5)
    assert (t["prompt_ms"], t["predicted_ms"], t["predicted_per_second"]) == (500.0, 1000.0, 5.0)
    assert usage(seq, 40, 5) == {"completion_tokens": 5, "prompt_tokens": 40, "total_tokens": 45,
                                 "prompt_tokens_details": {"cached_tokens": 32}}


def keys(raw: bytes) -> list[Any]:
    """A chunk's field names in order, and its first choice's (and their logprobs entry's)."""
    data = orjson.loads(raw[6:] if raw.startswith(b"data: ") else raw)
    out: list[Any] = list(data)
    if data.get("choices"):
        choice = data["choices"][0]
        out.append(list(choice))
        if isinstance(choice.get("logprobs"), dict):
            entry = choice["logprobs"]["content"][0]
            out.append(list(entry) + [list(entry["top_probs"][0]) if entry["top_probs"] else []])
    if isinstance(data.get("usage"), dict):
        out.append(list(data["usage"]))
    return out


async def frames(http: httpx.AsyncClient, path: str, body: dict[str, Any], cut: int | None = None) -> list[bytes]:
    """A stream's events (``data: {...}``), closed after ``cut`` content events if given."""
    body = {"model": MODEL, "stream": True, **body}
    out: list[bytes] = []
    async with http.stream("POST", path, json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                out.append(line.encode())
                if cut is not None and sum(1 for f in out if b'"content":"' in f or b'"text":" ' in f) == cut:
                    break
    return out


def text_of(events: list[bytes]) -> str:
    out = ""
    for raw in events:
        for choice in orjson.loads(raw[6:]).get("choices") or []:
            out += ((choice.get("delta") or {}).get("content") if "delta" in choice else choice.get("text")) or ""
    return out


def ids_in(events: list[bytes]) -> list[int]:
    return [i for raw in events for c in orjson.loads(raw[6:]).get("choices") or []
            for i in token_ids.logprob_ids(c) or []]  # fmt: skip


def chat_body(tokens: int = 12) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": chat_content_of_length(16)}], "max_tokens": tokens}


@pytest.mark.parametrize("name", sorted(SHAPE_CASES))
async def test_each_answer_has_the_shape_llamacpp_gave(llama: httpx.AsyncClient, name: str) -> None:
    path, body = SHAPE_CASES[name]
    r = await llama.post(path, json={**body, "model": MODEL})
    assert r.status_code == 200
    assert response_shape(r.content) == recorded_shapes()[name]


async def test_chat_chunks_have_llamacpps_fields_in_its_order(llama: httpx.AsyncClient) -> None:
    events = await frames(llama, CHAT, {**chat_body(3), "ignore_eos": True, **ASK_IDS})
    role, *words, finish = events
    assert keys(role) == keys(ROLE)
    assert [keys(w) for w in words] == [keys(WORD_IDS % (b" a", 1, b" a", 1, b" a", 1))] * 3
    data = orjson.loads(finish[6:])
    assert data["choices"] == [{"finish_reason": "length", "index": 0, "delta": {}}]
    assert list(data)[-1] == "timings" and data["timings"]["predicted_n"] == 3  # the last carries them unasked
    assert [orjson.loads(w[6:])["timings"]["predicted_n"] for w in words] == [1, 2, 3]


async def test_completions_chunks_have_llamacpps_fields_in_its_order(llama: httpx.AsyncClient) -> None:
    body = {"prompt": completion_prompt_of_length(16), "max_tokens": 2, "ignore_eos": True, **ASK_IDS}
    *words, finish = await frames(llama, COMPLETIONS, body)
    recorded_word = keys(CMPL % (b" a", 11, b" a", 1))
    recorded_word[-1] = recorded_word[-1][:-1] + [["id", "token", "bytes", "prob"]]  # (recorded with no candidates)
    assert [keys(w) for w in words] == [recorded_word] * 2
    assert keys(finish) == keys(CMPL_LAST)  # the usage unasked, then the id and the timings
    usage = orjson.loads(finish[6:])["usage"]
    timings = orjson.loads(finish[6:])["timings"]
    assert usage["prompt_tokens"] == timings["prompt_n"] + timings["cache_n"] and usage["completion_tokens"] == 2


async def test_each_tokens_id_is_in_its_logprobs_only_when_asked(llama: httpx.AsyncClient) -> None:
    body = {**chat_body(), "ignore_eos": True}
    asked = await frames(llama, CHAT, {**body, **ASK_IDS})
    plain = await frames(llama, CHAT, body)
    text = text_of(asked)
    assert text == text_of(plain) and ids_in(plain) == []
    assert ids_in(asked) == [word_id(VOCAB.words.index(" " + w)) for w in text.split()]
    # the gateway cuts what it asked for: then the chunk is llama.cpp's unasked one (the id and times aside)
    for a, p in zip(asked, plain, strict=True):
        cut, unasked = orjson.loads(token_ids.hide_logprobs(a, chat=True)[6:]), orjson.loads(p[6:])
        for chunk in (cut, unasked):
            for field in ("id", "created", "timings"):
                chunk.pop(field, None)
        assert cut == unasked and keys(orjson.dumps(cut)) == keys(orjson.dumps(unasked))
    lp = orjson.loads(asked[1][6:])["choices"][0]["logprobs"]["content"][0]
    assert lp["prob"] == 1.0 and lp["top_probs"][0]["id"] == lp["id"] and bytes(lp["bytes"]).decode() == lp["token"]


async def test_the_gateway_reads_every_id_and_the_count_from_a_llamacpp_stream(llama: httpx.AsyncClient) -> None:
    events = await frames(llama, CHAT, {**chat_body(), "ignore_eos": True, **ASK_IDS}, cut=5)
    t = Transcript(chat=True, ids=True, timings=True, logprob_ids=True)
    for raw in events:
        t.read(raw + b"\n\n")
    carried = t.next_part()
    assert carried.tokens == 5 and carried.ids is not None and len(carried.ids) == 5


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("k", [1, 7])
async def test_a_stream_cut_and_continued_from_its_text_and_ids_is_the_uncut_stream(
    llama: httpx.AsyncClient, path: str, k: int
) -> None:
    """As the gateway resumes on llama.cpp: the prompt's text (a chat's as ``/apply-template``
    renders it) followed by the ids so far, on ``/v1/completions``."""
    body = chat_body(30) if path == CHAT else {"prompt": completion_prompt_of_length(16), "max_tokens": 30}
    full = await frames(llama, path, {**body, **ASK_IDS})
    cut = await frames(llama, path, {**body, **ASK_IDS}, cut=k)
    if path == CHAT:
        r = await llama.post("/apply-template", json={"model": MODEL, **body})
        assert r.status_code == 200
        head = r.json()["prompt"]
    else:
        head = body["prompt"]
    ids = ids_in(cut)
    assert len(ids) == k
    rest = await frames(llama, COMPLETIONS, {"prompt": [head, *ids], "max_tokens": 30 - k, **ASK_IDS})
    assert text_of(cut) + text_of(rest) == text_of(full)
    assert ids + ids_in(rest) == ids_in(full)
    whole, usage = orjson.loads(full[-1][6:])["timings"], orjson.loads(rest[-1][6:])["usage"]
    assert k + usage["completion_tokens"] == whole["predicted_n"]  # it ends where the uncut one does
    assert usage["prompt_tokens"] == whole["prompt_n"] + whole["cache_n"] + k  # the prompt read back, and the ids


async def test_apply_template_renders_a_chat_prompt_and_refuses_bad_messages(llama: httpx.AsyncClient) -> None:
    r = await llama.post("/apply-template", json={"messages": [{"role": "system", "content": "Be brief."},
                                                              {"role": "user", "content": "Hi."}]})
    assert r.json() == {"prompt": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi.<|im_end|>\n"
                                  "<|im_start|>assistant\n"}
    bad = await llama.post("/apply-template", json={"messages": "hi"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"


async def test_a_whole_answer_has_llamacpps_fields_and_timings(llama: httpx.AsyncClient) -> None:
    r = await llama.post(CHAT, json={"model": MODEL, **chat_body(4), "ignore_eos": True})
    answer = r.json()
    assert list(answer) == ["choices", "created", "model", "system_fingerprint", "object", "usage", "id", "timings"]
    assert list(answer["choices"][0]) == ["finish_reason", "index", "message"]
    assert answer["timings"]["predicted_n"] == answer["usage"]["completion_tokens"] == 4


async def test_other_dialects_have_no_apply_template_and_refuse_a_mixed_prompt(http: httpx.AsyncClient) -> None:
    assert (await http.post("/apply-template", json={"messages": [{"role": "user", "content": "Hi."}]})).status_code == 404
    r = await http.post(COMPLETIONS, json={"model": MODEL, "prompt": ["Once", word_id(1)], "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"

