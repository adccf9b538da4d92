"""``Authenticator``: a key's SHA-256 → its tenant, tier and rights, from the config file
and from keys created through the API; an open gateway when the file names none."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from gateway.api.auth import Authenticator, quota_limits
from gateway.api.keystore import KeyStore
from gateway.errors import GatewayError
from gateway.settings import QuotaSettings, Settings, hash_key
from scheduler.policy.quota import QuotaLimits


def settings(**values: object) -> Settings:
    return Settings.model_validate(values)


KEYS = settings(api_keys=[
    {"sha256": hash_key("root"), "tenant": "ops", "admin": True, "id": "root"},
    {"sha256": hash_key("user"), "tenant": "t1", "tier": "batch", "quotas": {"concurrent": 2}, "trust_hints": True},
])


def test_a_configured_key_is_its_tenant_tier_and_quotas() -> None:
    auth = Authenticator(KEYS)
    user = auth.authenticate("Bearer user")
    assert (user.tenant, user.tier, user.admin, user.trust_hints) == ("t1", "batch", False, True)
    assert user.key_id == f"cfg-{hash_key('user')[:12]}" and user.quotas == QuotaLimits(None, None, 2)
    assert auth.authenticate("bearer   root ").key_id == "root"  # scheme case and spaces do not matter
    assert auth.required


@pytest.mark.parametrize(("header", "status"), [(None, 401), ("Basic dXNlcg==", 401), ("Bearer nope", 401)])
def test_a_missing_or_unknown_key_is_refused(header: str | None, status: int) -> None:
    with pytest.raises(GatewayError) as caught:
        Authenticator(KEYS).authenticate(header)
    assert caught.value.status == status and caught.value.code == "invalid_api_key"


def test_only_an_admin_key_is_admin() -> None:
    auth = Authenticator(KEYS)
    assert auth.admin("Bearer root").tenant == "ops"
    with pytest.raises(GatewayError) as caught:
        auth.admin("Bearer user")
    assert caught.value.status == 403


def test_with_no_keys_configured_the_gateway_is_open_to_one_trusted_operator() -> None:
    auth = Authenticator(settings())
    anyone = auth.authenticate(None)
    assert (anyone.tenant, anyone.tier, anyone.admin, anyone.trust_hints) == ("default", "interactive", True, True)
    assert auth.authenticate("Bearer whatever") == anyone
    assert not auth.required


@pytest.mark.parametrize(
    ("key", "header", "tier", "status"),
    [
        ("user", None, "batch", None),
        ("user", "batch", "batch", None),
        ("user", "interactive", None, 403),  # never a better tier than the key's
        ("root", "batch", "batch", None),  # a worse one, always
        ("root", "gold", None, 400),
    ],
)
def test_a_client_may_ask_for_its_own_tier_or_a_less_urgent_one(
    key: str, header: str | None, tier: str | None, status: int | None
) -> None:
    auth = Authenticator(KEYS)
    principal = auth.authenticate(f"Bearer {key}")
    if status is None:
        assert auth.tier(principal, header) == tier
        return
    with pytest.raises(GatewayError) as caught:
        auth.tier(principal, header)
    assert caught.value.status == status and caught.value.param == "x-triage-priority"


def test_a_reload_replaces_the_config_keys_whole() -> None:
    auth = Authenticator(KEYS)
    auth.reload(settings(api_keys=[{"sha256": hash_key("new"), "tenant": "t2"}]))
    assert auth.authenticate("Bearer new").tenant == "t2"
    with pytest.raises(GatewayError):
        auth.authenticate("Bearer user")
    assert [k.tenant for k in auth.config_keys] == ["t2"]


async def test_keys_created_through_the_api_authenticate_beside_the_config_files(redis: Redis, prefix: str) -> None:
    store = KeyStore(redis, prefix)
    key, record = await store.create("t9", "batch", False, QuotaSettings(tokens_per_minute=500))
    closed, open_ = Authenticator(KEYS, store), Authenticator(settings(), store)
    for auth in (closed, open_):  # also on an open gateway: the key still names its tenant
        found = auth.authenticate(f"Bearer {key}")
        assert (found.tenant, found.tier, found.key_id) == ("t9", "batch", record.id)
        assert found.quotas == QuotaLimits(None, 500, None) and not found.trust_hints
    await store.revoke(record.id)
    with pytest.raises(GatewayError):
        closed.authenticate(f"Bearer {key}")
    assert open_.authenticate(f"Bearer {key}").tenant == "default"  # open again: the anonymous caller


def test_quota_limits_maps_settings_to_the_schedulers_limits() -> None:
    assert quota_limits(None) is None
    assert quota_limits(QuotaSettings(requests_per_minute=1, tokens_per_minute=2, concurrent=3)) == QuotaLimits(1, 2, 3)
