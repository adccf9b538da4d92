"""The simulator in each engine's dialect: SSE framing, usage placement, ``/metrics``
names, the ``server`` header, model ids, and ``/v1/embeddings``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import httpx
import orjson
import pytest

from simulator.dialects import Dialect
from simulator.server import add_arguments, settings_from_args
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[Dialect, str]]:
    urls: dict[Dialect, str] = {}
    contexts = []
    try:
        for d in Dialect:
            ctx = running_simulator(SimSettings(profile="fast", model=MODEL, dialect=d))
            urls[d] = ctx.__enter__()
            contexts.append(ctx)
        yield urls
    finally:
        for ctx in reversed(contexts):
            ctx.__exit__(None, None, None)


def _served(d: Dialect) -> str:
    return f"{MODEL}:latest" if d is Dialect.OLLAMA else MODEL


def _stream(url: str, model: str, include_usage: bool) -> bytes:
    body = {
        "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True,
        "ignore_eos": True, "stream_options": {"include_usage": include_usage},
    }
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).content


@pytest.mark.parametrize("include_usage", [None, False, True], ids=["no-options", "usage-off", "usage-on"])
@pytest.mark.parametrize("dialect", [Dialect.VLLM, Dialect.LLAMACPP])
def test_llamacpp_completion_streams_carry_usage_on_the_finish_chunk_asked_or_not(
    sims: dict[Dialect, str], dialect: Dialect, include_usage: bool | None
) -> None:
    """As the real llama-server does on /v1/completions (its chat streams follow OpenAI)."""
    body: dict = {"model": _served(dialect), "prompt": "hi", "max_tokens": 3, "stream": True, "ignore_eos": True}
    if include_usage is not None:
        body["stream_options"] = {"include_usage": include_usage}
    raw = httpx.post(f"{sims[dialect]}/v1/completions", json=body, timeout=30).content
    chunks = [orjson.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    with_usage = [c for c in chunks if c.get("usage")]
    if dialect is Dialect.LLAMACPP:
        assert len(with_usage) == 1 and with_usage[0]["choices"][0]["finish_reason"] == "length"
        assert with_usage[0]["usage"]["completion_tokens"] == 3
    else:
        assert len(with_usage) == (1 if include_usage else 0)


@pytest.mark.parametrize(("dialect", "data", "end"), [
    (Dialect.VLLM, b"data: ", b"\n\n"),
    (Dialect.SGLANG, b"data: ", b"\n\n"),
    (Dialect.TGI, b"data:", b"\n\n"),
    (Dialect.LLAMACPP, b"data: ", b"\n\n"),  # llama-server 0.6 (an older one framed with CRLF)
    (Dialect.OLLAMA, b"data: ", b"\n\n"),
])
def test_sse_framing(sims: dict[Dialect, str], dialect: Dialect, data: bytes, end: bytes) -> None:
    raw = _stream(sims[dialect], _served(dialect), include_usage=True)
    assert raw.endswith(data + b"[DONE]" + end)
    events = [e for e in raw.split(end) if e]
    assert all(e.startswith(data + b"{") or e == data + b"[DONE]" for e in events)
    if end == b"\n\n":
        assert b"\r" not in raw
    chunks = [orjson.loads(e[len(data):]) for e in events[:-1]]
    with_usage = [c for c in chunks if c.get("usage")]
    assert len(with_usage) == 1 and with_usage[0]["usage"]["completion_tokens"] == 3
    if dialect is Dialect.TGI:  # on the last content chunk, which has its finish reason
        assert with_usage[0] is chunks[-1] and with_usage[0]["choices"][0]["finish_reason"] == "length"
    else:  # a usage-only chunk
        assert with_usage[0]["choices"] == []


@pytest.mark.parametrize("dialect", list(Dialect))
def test_no_usage_unless_asked(sims: dict[Dialect, str], dialect: Dialect) -> None:
    assert b'"usage":{' not in _stream(sims[dialect], _served(dialect), include_usage=False)


@pytest.mark.parametrize(("dialect", "names"), [
    (Dialect.VLLM, ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]),
    (Dialect.SGLANG, ["sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"]),
    (Dialect.TGI, ["tgi_batch_current_size", "tgi_queue_size"]),
    (Dialect.LLAMACPP, ["llamacpp:requests_processing", "llamacpp:requests_deferred"]),
])
def test_metric_names(sims: dict[Dialect, str], dialect: Dialect, names: list[str]) -> None:
    text = httpx.get(f"{sims[dialect]}/metrics").text
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
    assert set(names) <= samples
    own = {Dialect.VLLM: "vllm:", Dialect.SGLANG: "sglang:", Dialect.TGI: "tgi_", Dialect.LLAMACPP: "llamacpp:"}
    assert all(s.startswith(own[dialect]) for s in samples)  # no other engine's names


def test_ollama_has_no_metrics(sims: dict[Dialect, str]) -> None:
    assert httpx.get(f"{sims[Dialect.OLLAMA]}/metrics").status_code == 404


@pytest.mark.parametrize(("dialect", "server"), [
    (Dialect.VLLM, "uvicorn"), (Dialect.SGLANG, "uvicorn"), (Dialect.TGI, None), (Dialect.LLAMACPP, "llama.cpp"),
    (Dialect.OLLAMA, None),
])
def test_server_header(sims: dict[Dialect, str], dialect: Dialect, server: str | None) -> None:
    assert httpx.get(f"{sims[dialect]}/v1/models").headers.get("server") == server


@pytest.mark.parametrize(("dialect", "owned_by"), [
    (Dialect.VLLM, "vllm"), (Dialect.SGLANG, "sglang"), (Dialect.TGI, MODEL), (Dialect.LLAMACPP, "llamacpp"),
    (Dialect.OLLAMA, "library"),
])
def test_model_cards(sims: dict[Dialect, str], dialect: Dialect, owned_by: str) -> None:
    (card,) = httpx.get(f"{sims[dialect]}/v1/models").json()["data"]
    assert (card["id"], card["owned_by"]) == (_served(dialect), owned_by)
    assert ("max_model_len" in card) == (dialect in (Dialect.VLLM, Dialect.SGLANG))


def test_ollama_takes_the_bare_name_for_latest(sims: dict[Dialect, str]) -> None:
    url = sims[Dialect.OLLAMA]
    assert b"[DONE]" in _stream(url, MODEL, include_usage=False)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert httpx.post(f"{sims[Dialect.VLLM]}/v1/chat/completions", json={**body, "model": f"{MODEL}:latest"}).status_code == 404


def test_embeddings(sims: dict[Dialect, str]) -> None:
    url = sims[Dialect.VLLM]
    resp = httpx.post(f"{url}/v1/embeddings", json={"model": MODEL, "input": ["one", "one", "two"]})
    assert resp.status_code == 200
    body = resp.json()
    vectors = [d["embedding"] for d in body["data"]]
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert vectors[0] == vectors[1] != vectors[2]  # seeded by the text
    assert abs(sum(x * x for x in vectors[0]) - 1) < 1e-3  # unit length
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    bad = httpx.post(f"{url}/v1/embeddings", json={"model": MODEL, "input": []})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input"
    assert httpx.post(f"{url}/v1/embeddings", json={"model": "other", "input": "x"}).status_code == 404


def test_dialect_flag() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert settings_from_args(parser.parse_args([])).dialect is Dialect.VLLM
    assert settings_from_args(parser.parse_args(["--dialect", "tgi"])).dialect is Dialect.TGI
    with pytest.raises(SystemExit):
        parser.parse_args(["--dialect", "nope"])


def test_n_choices_non_streamed(sims: dict[Dialect, str]) -> None:
    url = sims[Dialect.VLLM]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "ignore_eos": True}
    resp = httpx.post(f"{url}/v1/chat/completions", json={**body, "n": 3}, timeout=30).json()
    assert [c["index"] for c in resp["choices"]] == [0, 1, 2]
    assert all(c["finish_reason"] == "length" and c["message"]["content"] for c in resp["choices"])
    assert resp["usage"]["completion_tokens"] == 12  # every choice's tokens
    streamed = httpx.post(f"{url}/v1/chat/completions", json={**body, "n": 2, "stream": True}, timeout=30)
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "n"
    assert httpx.post(f"{url}/v1/chat/completions", json={**body, "n": 0}, timeout=30).status_code == 400
