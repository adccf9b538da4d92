"""The key API on a served gateway: its answers to bad bodies and to the wrong caller,
and a key's life (created, listed, used, revoked) beside the config file's keys."""

from __future__ import annotations

import httpx
import pytest
from redis.asyncio import Redis

from gateway.api.admin_keys import router
from gateway.settings import hash_key
from scheduler.queue.keys import ApiKeyKeys
from tests.gateway.api.conftest import ROOT, USER, Served


def test_the_contract_routes() -> None:
    routes = {(method, r.path) for r in router.routes for method in r.methods}  # type: ignore[attr-defined]
    assert routes == {("POST", "/admin/keys"), ("GET", "/admin/keys"), ("DELETE", "/admin/keys/{key_id}")}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"not json", None),
        (b"[1]", None),
        (b'{"tenant": "has space"}', "tenant"),
        (b'{"tenant": "t1", "colour": "red"}', "colour"),
        (b'{"tenant": "t1", "tier": "gold"}', "tier"),
        (b'{"tenant": "t1", "quotas": {"concurrent": -1}}', "quotas.concurrent"),
    ],
)
async def test_a_bad_body_is_a_400_naming_the_field(served: Served, body: bytes, param: str | None) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        resp = await http.post("/admin/keys", content=body, headers=ROOT)
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == param


async def test_only_an_admin_may_use_the_key_api(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        assert (await http.post("/admin/keys", json={"tenant": "t1"}, headers=USER)).status_code == 403
        assert (await http.get("/admin/keys")).status_code == 401
        assert (await http.delete("/admin/keys/root", headers=USER)).status_code == 403


async def test_a_keys_life_beside_the_config_files_keys(served: Served, redis: Redis) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        created = await http.post(
            "/admin/keys", json={"tenant": "t7", "tier": "batch", "quotas": {"concurrent": 3}}, headers=ROOT
        )
        assert created.status_code == 201 and created.headers["cache-control"] == "no-store"
        new = created.json()
        assert (new["tenant"], new["tier"], new["admin"], new["quotas"]) == ("t7", "batch", False, {"concurrent": 3})
        key, key_id = new["key"], new["id"]
        stored = await redis.hkeys(ApiKeyKeys(served.prefix).by_hash)
        assert hash_key(key).encode() in stored

        listed = (await http.get("/admin/keys", headers=ROOT)).json()["data"]
        assert [(k["id"], k["source"]) for k in listed] == [("root", "config"), ("user", "config"), (key_id, "api")]
        assert all("key" not in k and "sha256" not in k for k in listed)
        user = {"authorization": f"Bearer {key}"}
        assert (await http.get("/v1/models", headers=user)).status_code == 200  # at once on this replica

        config_key = await http.delete("/admin/keys/user", headers=ROOT)
        assert config_key.status_code == 409 and config_key.json()["error"]["code"] == "config_key"
        unknown = await http.delete("/admin/keys/key_nope", headers=ROOT)
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "key_not_found"

        revoked = await http.delete(f"/admin/keys/{key_id}", headers=ROOT)
        assert revoked.json() == {"id": key_id, "object": "key", "deleted": True}
        assert (await http.get("/v1/models", headers=user)).status_code == 401
        assert [k["id"] for k in (await http.get("/admin/keys", headers=ROOT)).json()["data"]] == ["root", "user"]
