"""A gateway served on loopback for the API tests (one per module), in front of the
session's simulator, with a config-file admin key (``root``) and a user key (``user``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi import FastAPI

from gateway.app import create_app
from gateway.settings import Settings, hash_key
from tests.support import MODEL, running_app

ROOT = {"authorization": "Bearer root"}
USER = {"authorization": "Bearer user"}


@dataclass(frozen=True)
class Served:
    url: str
    app: FastAPI
    prefix: str


@pytest.fixture(scope="module")
def served(redis_url: str, sim_url: str) -> Iterator[Served]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    settings = Settings.model_validate({
        "redis_url": redis_url, "key_prefix": prefix, "key_sync_s": 0.2,
        "backends": [{"name": "sim", "url": sim_url, "models": [MODEL], "max_concurrency": 8}],
        "api_keys": [
            {"sha256": hash_key("root"), "tenant": "ops", "admin": True, "id": "root"},
            {"sha256": hash_key("user"), "tenant": "t1", "id": "user"},
        ],
    })
    app = create_app(settings)
    with running_app(app) as url:
        yield Served(url, app, prefix)
