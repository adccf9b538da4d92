"""``x-triage-expected-tokens`` decides the queue order, so it is a privilege of keys
configured with ``trust_hints``; from any other key it is checked, then ignored."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from gateway.settings import hash_key
from tests.support import MODEL

CHAT = "/v1/chat/completions"
BODY = {"model": MODEL, "max_tokens": 4000, "messages": [{"role": "user", "content": "hello"}]}


async def test_only_keys_trusted_with_hints_can_make_their_request_short(
    gateway_factory: Callable[..., str], sim_url: str
) -> None:
    keys = [
        {"sha256": hash_key("sk-app"), "tenant": "app", "trust_hints": True},
        {"sha256": hash_key("sk-user"), "tenant": "user"},
    ]
    url = gateway_factory(
        [{"name": "sim", "url": sim_url, "models": [MODEL]}], api_keys=keys, predictor="prior",
        prior_tokens=2000,
    )
    hint = {"x-triage-expected-tokens": "1"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:

        async def cls(key: str, headers: dict[str, str]) -> str:
            """The class the request was queued in (max_tokens 4000, a prior of 2000)."""
            resp = await http.post(CHAT, json=BODY, headers={"authorization": f"Bearer {key}", **headers})
            assert resp.status_code == 200, resp.text
            return resp.headers["x-triage-class"]

        assert await cls("sk-user", {}) == "long"
        assert await cls("sk-user", hint) == "long"  # ignored: this key may not jump the queue
        assert await cls("sk-app", hint) == "short"
        assert await cls("sk-app", {}) == "long"
        # checked all the same: garbage is a 400 from every key
        resp = await http.post(CHAT, json=BODY, headers={"authorization": "Bearer sk-user",
                                                         "x-triage-expected-tokens": "1_000"})
        assert resp.status_code == 400
        assert resp.json()["error"]["param"] == "x-triage-expected-tokens"


async def test_without_keys_hints_are_trusted(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
        resp = await http.post(CHAT, json={**BODY, "max_tokens": 3000},
                               headers={"x-triage-expected-tokens": "1"})
        assert resp.headers["x-triage-class"] == "short"


async def test_a_trusted_tenant_whose_hints_run_long_loses_the_trust(
    gateway_factory: Callable[..., str], sim_url: str
) -> None:
    keys = [{"sha256": hash_key("sk-liar"), "tenant": "liar", "trust_hints": True}]
    url = gateway_factory(
        [{"name": "sim", "url": sim_url, "models": [MODEL]}], api_keys=keys, predictor="prior",
        prior_tokens=2000, short_max_tokens=16,
    )
    # max_tokens 60 alone is class medium; the reply is exactly 60 tokens long
    body = {**BODY, "max_tokens": 60, "ignore_eos": True}
    headers = {"authorization": "Bearer sk-liar", "x-triage-expected-tokens": "1"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        classes = []
        for _ in range(8):
            resp = await http.post(CHAT, json=body, headers=headers)
            assert resp.status_code == 200, resp.text
            classes.append(resp.headers["x-triage-class"])
    assert classes[0] == "short"  # believed at first
    assert classes[-1] == "medium"  # no longer: its replies ran 60 tokens, not 1
    assert classes == sorted(classes, key=lambda c: c == "medium")  # once lost, not regained by lying


def test_hint_trust_is_won_back_by_hints_that_hold() -> None:
    from scheduler.policy.hints import HintTrust

    trust = HintTrust()
    for _ in range(10):
        trust.observe("t", 1, 300)
    assert not trust.trusted("t")
    assert trust.trusted("other")
    for _ in range(10):
        trust.observe("t", 300, 280)
    assert trust.trusted("t")
