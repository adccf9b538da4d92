"""The benchmark's length sidecar in front of the real vLLM: replies stop at the listed
length, a continuation gets the rest of it, and unlisted requests pass unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadtests.engines.cli import main as engine_main
from loadtests.engines.length_proxy import LengthProxy
from loadtests.engines.vllm import VllmServer
from tests.support import running_app

LISTED = {"Tell me about queues.": 23, "Once upon a time": 17}


@pytest.fixture
def proxy(vllm: VllmServer) -> Iterator[str]:
    with running_app(LengthProxy(vllm.url, dict(LISTED))) as url:
        yield url


async def test_a_listed_prompt_stops_at_its_length_without_max_tokens(vllm: VllmServer, proxy: str) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        chat = await http.post(f"{proxy}/v1/chat/completions", json={
            "model": vllm.model, "messages": [{"role": "user", "content": "Tell me about queues."}]})
        done = await http.post(f"{proxy}/v1/completions", json={"model": vllm.model, "prompt": "Once upon a time"})
    assert chat.status_code == done.status_code == 200
    assert chat.json()["usage"]["completion_tokens"] == 23
    assert done.json()["usage"]["completion_tokens"] == 17


async def test_a_continuation_gets_the_rest_of_its_length(vllm: VllmServer, proxy: str) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        so_far = "Queues are lines of work"
        count = (await http.post(f"{vllm.url}/tokenize", json={"model": vllm.model, "prompt": so_far,
                                                               "add_special_tokens": False})).json()["count"]
        chat = await http.post(f"{proxy}/v1/chat/completions", json={
            "model": vllm.model, "continue_final_message": True, "add_generation_prompt": False,
            "messages": [{"role": "user", "content": "Tell me about queues."},
                         {"role": "assistant", "content": so_far}]})
        done = await http.post(f"{proxy}/v1/completions", json={"model": vllm.model,
                                                                "prompt": "Once upon a time" + so_far})
    assert chat.json()["usage"]["completion_tokens"] == 23 - count
    assert done.json()["usage"]["completion_tokens"] == 17 - count


async def test_unlisted_requests_and_other_paths_pass_through(vllm: VllmServer, proxy: str) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        resp = await http.post(f"{proxy}/v1/completions", json={"model": vllm.model, "prompt": "unlisted",
                                                                "max_tokens": 3, "ignore_eos": True})
        models = await http.get(f"{proxy}/v1/models")
    assert resp.json()["usage"]["completion_tokens"] == 3
    assert models.status_code == 200 and models.json()["data"][0]["id"] == vllm.model


def test_the_command_builds_the_model_folder(vllm: VllmServer, tmp_path: Path) -> None:
    assert engine_main(["--build-only", "--model-dir", str(tmp_path / "m"), "--seed", "3"]) == 0
    assert (tmp_path / "m" / "model.safetensors").is_file() and (tmp_path / "m" / "tokenizer.json").is_file()
