"""The key API, a contract: create, list, revoke; every replica follows Redis within seconds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from redis.asyncio import Redis

from gateway.settings import hash_key
from scheduler.queue.keys import ApiKeyKeys
from tests.support import MODEL, eventually

CHAT = "/v1/chat/completions"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
ADMIN = {"authorization": "Bearer root"}


def config() -> dict[str, Any]:
    return {"api_keys": [
        {"sha256": hash_key("root"), "tenant": "ops", "admin": True, "id": "root"},
        {"sha256": hash_key("user"), "tenant": "t0"},
    ], "key_sync_s": 0.2}


async def test_a_key_created_on_one_replica_works_on_the_other_until_revoked(
    gateway_factory: Callable[..., str], sim_url: str, redis: Redis, prefix: str
) -> None:
    backends = [{"name": "sim", "url": sim_url, "models": [MODEL]}]
    a, b = gateway_factory(backends, **config()), gateway_factory(backends, **config())
    async with httpx.AsyncClient(timeout=30) as http:
        created = await http.post(a + "/admin/keys", json={"tenant": "t1", "tier": "batch"}, headers=ADMIN)
        assert created.status_code == 201, created.text
        new = created.json()
        assert new["tenant"] == "t1" and new["tier"] == "batch" and new["key"].startswith("sk-triage-")
        key_id, key = new["id"], new["key"]
        user = {"authorization": f"Bearer {key}"}

        # Redis holds the hash only
        stored = await redis.hgetall(ApiKeyKeys(prefix).by_hash)
        assert list(stored) == [hash_key(key).encode()]
        assert key.encode() not in b"".join(stored.values())

        listed = (await http.get(b + "/admin/keys", headers=ADMIN)).json()["data"]
        assert {(k["id"], k["tenant"], k["tier"], k["source"]) for k in listed} >= {
            (key_id, "t1", "batch", "api"), ("root", "ops", "interactive", "config")}
        assert all("key" not in k and "sha256" not in k for k in listed)

        async def answers(url: str, status: int) -> bool:
            return (await http.post(url + CHAT, json=BODY, headers=user)).status_code == status

        await eventually(lambda: answers(b, 200))  # the other replica learned of it
        resp = await http.post(b + CHAT, json=BODY, headers={**user, "x-triage-priority": "interactive"})
        assert resp.status_code == 403  # a batch key may not ask for a better tier

        revoked = await http.delete(f"{a}/admin/keys/{key_id}", headers=ADMIN)
        assert revoked.status_code == 200 and revoked.json()["deleted"] is True
        assert await answers(a, 401)  # at once where it was revoked
        await eventually(lambda: answers(b, 401))  # and on the other replica within seconds
        listed = (await http.get(a + "/admin/keys", headers=ADMIN)).json()["data"]
        assert key_id not in {k["id"] for k in listed}
        again = await http.delete(f"{a}/admin/keys/{key_id}", headers=ADMIN)
        assert again.status_code == 404 and again.json()["error"]["code"] == "key_not_found"


async def test_a_created_key_carries_its_quotas(gateway_factory: Callable[..., str], sim_url: str) -> None:
    url = gateway_factory([{"name": "sim", "url": sim_url, "models": [MODEL]}], **config())
    async with httpx.AsyncClient(timeout=30) as http:
        new = (await http.post(url + "/admin/keys", headers=ADMIN,
                               json={"tenant": "t1", "quotas": {"requests_per_minute": 1}})).json()
        user = {"authorization": f"Bearer {new['key']}"}
        first = await http.post(url + CHAT, json=BODY, headers=user)
        second = await http.post(url + CHAT, json=BODY, headers=user)
    assert (first.status_code, second.status_code) == (200, 429)
    assert new["id"] in second.json()["error"]["message"]


async def test_only_admins_and_only_good_bodies(gateway_factory: Callable[..., str], sim_url: str) -> None:
    url = gateway_factory([{"name": "sim", "url": sim_url, "models": [MODEL]}], **config())
    cases: list[tuple[dict[str, str], Any, int, str | None]] = [
        ({"authorization": "Bearer user"}, {"tenant": "t1"}, 403, None),
        ({}, {"tenant": "t1"}, 401, None),
        (ADMIN, b"{nope", 400, None),
        (ADMIN, [1], 400, None),
        (ADMIN, {}, 400, "tenant"),
        (ADMIN, {"tenant": "bad tenant"}, 400, "tenant"),
        (ADMIN, {"tenant": "t1", "tier": "gold"}, 400, "tier"),
        (ADMIN, {"tenant": "t1", "colour": "red"}, 400, "colour"),
        (ADMIN, {"tenant": "t1", "quotas": {"requests_per_minute": -1}}, 400, "quotas.requests_per_minute"),
    ]
    async with httpx.AsyncClient(timeout=30) as http:
        for headers, body, status, param in cases:
            content = body if isinstance(body, bytes) else httpx.Request("POST", url, json=body).content
            resp = await http.post(url + "/admin/keys", content=content, headers=headers)
            assert resp.status_code == status, (body, resp.text)
            error = resp.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            if param is not None:
                assert error["param"] == param
        assert (await http.get(url + "/admin/keys", headers={"authorization": "Bearer user"})).status_code == 403
        conflict = await http.delete(url + "/admin/keys/root", headers=ADMIN)
        assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "config_key"
