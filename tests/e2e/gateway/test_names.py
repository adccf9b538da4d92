"""Model names and the endpoints beside generation: aliases, Ollama's implicit
``:latest``, ``/v1/models`` with the backends' own fields, ``/v1/models/{id}``, and
``/v1/embeddings`` routed and passed through."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from simulator.dialects import Dialect
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL


@pytest.fixture(scope="module")
def ollama() -> Iterator[str]:
    with running_simulator(SimSettings(profile="fast", model="llama3.2", dialect=Dialect.OLLAMA)) as url:
        yield url


@pytest.fixture
def gw(gateway_factory: Callable[..., str], sim_url: str, ollama: str) -> str:
    backends = [
        {"name": "vllm", "url": sim_url, "max_concurrency": 8},
        {"name": "ollama", "url": ollama, "pool": "local"},
    ]
    return gateway_factory(backends, aliases={"small": "llama3.2", "default-chat": MODEL})


def _chat(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "ignore_eos": True}


@pytest.mark.parametrize(("asked", "served"), [
    ("llama3.2", "llama3.2:latest"),  # Ollama's implicit tag
    ("llama3.2:latest", "llama3.2:latest"),
    ("small", "llama3.2:latest"),  # an alias, then the implicit tag
    ("default-chat", MODEL),
])
async def test_names_reach_the_backend_that_serves_them(gw: str, asked: str, served: str) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(f"{gw}/v1/chat/completions", json=_chat(asked))
    assert resp.status_code == 200, resp.text
    assert resp.json()["model"] == served  # the backend was sent the served name
    assert resp.headers["x-triage-backend"] == ("vllm" if served == MODEL else "ollama")


async def test_unknown_model_is_an_openai_404(gw: str) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(f"{gw}/v1/chat/completions", json=_chat("llama3.2:1b"))
        one = await client.get(f"{gw}/v1/models/nope")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    assert one.status_code == 404
    assert one.json() == {"error": {
        "message": "The model 'nope' does not exist.", "type": "invalid_request_error", "param": "model",
        "code": "model_not_found",
    }}


async def test_models_keep_the_backends_fields(gw: str) -> None:
    async with openai.AsyncOpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0) as client:
        listed = {m.id: m.model_dump() async for m in client.models.list()}
        one = await client.models.retrieve("llama3.2")  # by the same name resolution
        again = (await client.models.retrieve(MODEL)).model_dump()
    assert set(listed) == {MODEL, "llama3.2:latest"}  # each once
    assert listed[MODEL]["owned_by"] == "vllm" and listed[MODEL]["max_model_len"] > 0
    assert listed["llama3.2:latest"]["owned_by"] == "library"
    assert one.id == "llama3.2:latest"
    assert again["max_model_len"] == listed[MODEL]["max_model_len"]


async def test_a_model_served_twice_is_listed_once(gateway_factory: Callable[..., str], sim_url: str) -> None:
    base = gateway_factory([{"name": "a", "url": sim_url}, {"name": "b", "url": sim_url}])
    async with httpx.AsyncClient() as client:
        data = (await client.get(f"{base}/v1/models")).json()["data"]
    assert [m["id"] for m in data] == [MODEL]


async def test_embeddings_are_routed_and_passed_through(gw: str) -> None:
    async with openai.AsyncOpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0) as client:
        resp = await client.embeddings.with_raw_response.create(model="small", input=["one", "two words"])
    assert resp.headers["x-triage-backend"] == "ollama"
    assert resp.headers["x-triage-class"] == "short"  # no output tokens: short work
    body = resp.parse()
    assert [d.index for d in body.data] == [0, 1]
    assert len(body.data[0].embedding) == 8 and body.data[0].embedding != body.data[1].embedding
    assert body.usage.prompt_tokens > 0


@pytest.mark.parametrize(("body", "param"), [
    ({"model": MODEL}, "input"),
    ({"model": MODEL, "input": []}, "input"),
    ({"model": MODEL, "input": [1, "a"]}, "input"),
    ({"input": "x"}, "model"),
])
async def test_bad_embeddings_requests_are_400(gw: str, body: dict[str, Any], param: str) -> None:
    async with httpx.AsyncClient() as client:
        resp = await client.post(f"{gw}/v1/embeddings", json=body)
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == param


async def test_n_choices_are_placed_as_n_times_the_work(gw: str) -> None:
    # a hint of 200 tokens a reply (open mode trusts hints): one choice is short work, two are 400
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    hint = {"x-triage-expected-tokens": "200"}
    async with httpx.AsyncClient(timeout=30) as client:
        one = await client.post(f"{gw}/v1/chat/completions", json=chat, headers=hint)
        two = await client.post(f"{gw}/v1/chat/completions", json={**chat, "n": 2}, headers=hint)
        bad = await client.post(f"{gw}/v1/chat/completions", json={**chat, "n": 0})
    assert one.status_code == two.status_code == 200
    assert one.headers["x-triage-class"] == "short"
    assert two.headers["x-triage-class"] == "medium"
    assert len(two.json()["choices"]) == 2
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "n"
