"""The Locust file: without Locust it defines no user (so importing every module works),
and its requests are planned from the workload, model and seed named in the environment."""

from __future__ import annotations

import importlib.util

import pytest

import loadtests.locustfile as locustfile
from loadtests.workload import Api


@pytest.mark.skipif(importlib.util.find_spec("locust") is not None, reason="Locust is installed here")
def test_without_locust_importing_it_defines_no_user() -> None:
    assert locustfile.HttpUser is None
    assert not hasattr(locustfile, "ChatUser")


def test_requests_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAGE_WORKLOAD", "synthetic")
    monkeypatch.setenv("TRIAGE_MODEL", "my-model")
    monkeypatch.setenv("TRIAGE_SEED", "7")

    def planned() -> list[tuple[str, int]]:
        factory, _ = locustfile._planner()
        return [(r.prompt, r.max_tokens) for r in map(factory.next, range(5))]

    _, target = locustfile._planner()
    assert target.model == "my-model" and target.api is Api.CHAT and target.stream
    seven = planned()
    assert planned() == seven  # every user process of one run sends the same requests
    monkeypatch.setenv("TRIAGE_SEED", "8")
    assert planned() != seven
