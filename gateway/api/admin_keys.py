"""The key API: ``POST /admin/keys``, ``GET /admin/keys``, ``DELETE /admin/keys/{id}``.

A contract, for scripts and operators (admin key needed when keys are configured):

- ``POST /admin/keys`` with ``{"tenant": "t1"}`` and optionally ``"tier"``,
  ``"admin"`` and ``"quotas"`` (``requests_per_minute``, ``tokens_per_minute``,
  ``concurrent``) answers ``201`` with the record and the new key, once, in ``key``.
- ``GET /admin/keys`` lists ids, tenants, tiers, admin flags and quotas (the config
  file's keys too, marked ``"source": "config"``), never a key or its hash.
- ``DELETE /admin/keys/{id}`` revokes a key created here; every replica refuses it
  within ``key_sync_s``. ``404`` for an unknown id; ``409`` for a config-file key
  (those are removed by editing the file; the gateway reloads it).
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from redis.exceptions import RedisError
from starlette.responses import Response

from gateway.api.state import Gateway
from gateway.errors import GatewayError
from gateway.settings import QuotaSettings

router = APIRouter()


class NewKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    tier: str | None = None
    admin: bool = False
    quotas: QuotaSettings | None = None


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json", headers={"cache-control": "no-store"})


def _unavailable(exc: RedisError) -> GatewayError:
    return GatewayError(503, f"The key store cannot be reached: {exc}", "service_unavailable",
                        "scheduler_unavailable", retry_after_s=2)


def _parse(raw: bytes, tiers: list[str]) -> NewKey:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise GatewayError(400, "The body must be JSON such as {\"tenant\": \"t1\"}.") from None
    if not isinstance(body, dict):
        raise GatewayError(400, "The body must be a JSON object such as {\"tenant\": \"t1\"}.")
    try:
        new = NewKey.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise GatewayError(400, f"{param}: {msg}", param=param) from None
    if new.tier is not None and new.tier not in tiers:
        raise GatewayError(400, f"tier must be one of {tiers}", param="tier")
    return new


@router.post("/admin/keys")
async def create_key(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    try:
        gw.auth.admin(request.headers.get("authorization"))
        new = _parse(await request.body(), list(gw.settings.tiers))
        try:
            key, record = await gw.keys.create(new.tenant, new.tier or gw.settings.tiers[0], new.admin, new.quotas)
        except RedisError as exc:
            raise _unavailable(exc) from None
    except GatewayError as exc:
        return exc.response()
    return _json({**record.view(), "key": key}, 201)


@router.get("/admin/keys")
async def list_keys(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    try:
        gw.auth.admin(request.headers.get("authorization"))
        try:
            records = await gw.keys.list()
        except RedisError as exc:
            raise _unavailable(exc) from None
    except GatewayError as exc:
        return exc.response()
    configured = [
        {"id": k.key_id, "tenant": k.tenant, "tier": k.tier, "admin": k.admin,
         "quotas": k.quotas.model_dump(exclude_none=True) if k.quotas else None, "source": "config"}
        for k in gw.auth.config_keys
    ]
    return _json({"object": "list", "data": configured + [r.view() for r in records]})


@router.delete("/admin/keys/{key_id}")
async def revoke_key(request: Request, key_id: str) -> Response:
    gw: Gateway = request.app.state.gateway
    try:
        gw.auth.admin(request.headers.get("authorization"))
        if any(k.key_id == key_id for k in gw.auth.config_keys):
            raise GatewayError(409, f"Key '{key_id}' is in the config file: remove it there (the gateway reloads "
                               "the file).", code="config_key", param="id")
        try:
            revoked = await gw.keys.revoke(key_id)
        except RedisError as exc:
            raise _unavailable(exc) from None
        if not revoked:
            raise GatewayError(404, f"No key with id '{key_id}'.", "not_found_error", "key_not_found", "id")
    except GatewayError as exc:
        return exc.response()
    return _json({"id": key_id, "object": "key", "deleted": True})
