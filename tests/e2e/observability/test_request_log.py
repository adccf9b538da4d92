"""The per-request log line: opt-in, one JSON object per request, never the prompt."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import httpx
import orjson
import pytest

from gateway.settings import hash_key
from gateway.telemetry.request_log import LOGGER
from tests.support import MODEL, eventually

SECRET = "the prompt text must never be logged"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(orjson.loads(record.getMessage()))


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler, logger = Lines(), logging.getLogger(LOGGER)
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def test_one_line_per_request_with_who_what_and_how_long(
    gateway_factory: Callable[..., str], sim_url: str, lines: Lines
) -> None:
    url = gateway_factory(
        [{"name": "sim", "url": sim_url, "models": [MODEL]}], request_log=True,
        api_keys=[{"sha256": hash_key("k1"), "tenant": "t1", "id": "key-one"}],
        tenant_quotas={"t1": {"requests_per_minute": 2}},
    )
    auth = {"authorization": "Bearer k1"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": SECRET}], "max_tokens": 7, "ignore_eos": True}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        ok = await http.post("/v1/chat/completions", json=body, headers=auth)
        async with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}, headers=auth) as s:
            assert s.status_code == 200
            await s.aread()
        refused = await http.post("/v1/chat/completions", json=body, headers=auth)
    assert (ok.status_code, refused.status_code) == (200, 429)
    await eventually(lambda: len(lines.lines) == 3)
    plain, streamed, over = lines.lines
    for line in lines.lines:
        assert (line["event"], line["tenant"], line["key_id"], line["model"]) == ("request", "t1", "key-one", MODEL)
        assert SECRET not in orjson.dumps(line).decode()
    assert plain["request_id"] == ok.headers["x-request-id"]
    assert (plain["outcome"], plain["status"], plain["output_tokens"], plain["class"]) == ("ok", 200, 7, "short")
    assert plain["input_tokens"] > 0 and plain["predicted_tokens"] is not None
    assert plain["queue_wait_s"] >= 0 and plain["duration_s"] > 0 and plain["backend"] == "sim"
    assert (streamed["outcome"], streamed["output_tokens"]) == ("ok", 7)
    assert streamed["ttft_s"] is not None and streamed["ttft_s"] > 0
    assert (over["outcome"], over["status"], over["output_tokens"]) == ("quota", 429, None)


async def test_off_by_default(gateway: str, lines: Lines) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        resp = await http.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
    assert resp.status_code == 200
    assert lines.lines == []
