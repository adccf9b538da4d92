"""Bad input gets an OpenAI-style error with the right status, never a 500."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from gateway.settings import hash_key
from tests.support import MODEL

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


def assert_error(resp: httpx.Response, status: int, param: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (b'{"messages": [{"role": "user", "content": "hi"}]}', 400, "model"),
        (b'{"model": "sim-model"}', 400, "messages"),
        (b'{"model": "sim-model", "messages": []}', 400, "messages"),
        (b'{"model": "sim-model", "messages": ["hi"]}', 400, "messages[0]"),
        (b'{"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": -5}', 400, "max_tokens"),
        (b'{"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "9"}', 400, "max_tokens"),
        (b'{"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10000000000}', 400, "max_tokens"),
        (b'{"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', 400, "stream"),
        (b'{"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}', 404, "model"),
        # nested past what the gateway can re-encode, in a field it never reads (was a 500)
        (b'{"model": "sim-model", "stream": true, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}], "x": '
         + b"[" * 254 + b"]" * 254 + b"}", 400, None),
    ],
)
async def test_bad_chat_bodies(gateway: str, body: bytes, status: int, param: str | None) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        resp = await http.post(CHAT, content=body, headers={"content-type": "application/json"})
    assert_error(resp, status, param)


async def test_bad_completion_prompt(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        resp = await http.post("/v1/completions", json={"model": MODEL, "prompt": {"x": 1}})
    assert_error(resp, 400, "prompt")


async def test_oversized_body(gateway_factory: Callable[..., str], sim_url: str) -> None:
    url = gateway_factory([{"name": "sim", "url": sim_url, "models": [MODEL]}], max_body_bytes=2048)
    async with httpx.AsyncClient(base_url=url) as http:
        resp = await http.post(CHAT, json={"model": MODEL, "messages": [{"role": "user", "content": "x" * 5000}]})
    assert_error(resp, 413)


async def test_bad_headers(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        for bad in ("soon", "9" * 4300, "1_000", "+5"):  # 4,300 digits overflowed a float: a 500
            resp = await http.post(CHAT, json={"model": MODEL, "messages": MSG}, headers={"x-triage-timeout-ms": bad})
            assert_error(resp, 400, "x-triage-timeout-ms")
        resp = await http.post(CHAT, json={"model": MODEL, "messages": MSG}, headers={"x-triage-priority": "vip"})
        assert_error(resp, 400, "x-triage-priority")


async def test_unknown_path_and_method(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        assert_error(await http.get("/v1/nothing"), 404)
        assert_error(await http.get(CHAT), 405)


async def test_keys_map_to_tenants(gateway_factory: Callable[..., str], sim_url: str) -> None:
    keys = [
        {"sha256": hash_key("sk-alice"), "tenant": "alice"},
        {"sha256": hash_key("sk-bob"), "tenant": "bob", "tier": "batch"},
    ]
    url = gateway_factory([{"name": "sim", "url": sim_url, "models": [MODEL]}], api_keys=keys)
    body = {"model": MODEL, "messages": MSG, "max_tokens": 2}
    async with httpx.AsyncClient(base_url=url) as http:
        assert_error(await http.post(CHAT, json=body), 401)
        assert_error(await http.post(CHAT, json=body, headers={"authorization": "Bearer sk-mallory"}), 401)
        assert (await http.post(CHAT, json=body, headers={"authorization": "Bearer sk-alice"})).status_code == 200
        assert_error(await http.get("/v1/models"), 401)
        # a batch key may not promote itself to the interactive tier
        resp = await http.post(
            CHAT, json=body, headers={"authorization": "Bearer sk-bob", "x-triage-priority": "interactive"}
        )
        assert_error(resp, 403, "x-triage-priority")


async def test_backend_errors_pass_through(gateway: str) -> None:
    # the simulator refuses a context longer than its window with its own 400 body
    async with httpx.AsyncClient(base_url=gateway) as http:
        resp = await http.post(CHAT, json={"model": MODEL, "messages": MSG, "max_tokens": 999_999})
    error = assert_error(resp, 400)
    assert "x-request-id" in resp.headers
    assert error["type"]
