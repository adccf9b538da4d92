"""Hot reload of backends and keys, with requests in flight: a stream on a backend the
reload removes still completes; the new backend takes the new work; a removed key is
refused; a config that does not load leaves the running one in place. Then the same
through SIGHUP on a real ``triage serve`` process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from gateway.app import create_app
from gateway.server.embedded import free_port
from gateway.server.reload import ConfigSource
from gateway.settings import hash_key
from simulator.settings import SimSettings
from simulator.testing import running_simulator
from tests.support import MODEL, eventually, running_app

CHAT = "/v1/chat/completions"
ROOT_KEY = {"authorization": "Bearer root"}


def keys(*names: str) -> list[dict[str, Any]]:
    return [{"sha256": hash_key("root"), "tenant": "ops", "admin": True}] + [
        {"sha256": hash_key(n), "tenant": n} for n in names
    ]


def write(path: Path, **config: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config))
    tmp.replace(path)  # whole, as a ConfigMap update is


async def backends_now(http: httpx.AsyncClient, url: str) -> set[str]:
    return {b["name"] for b in (await http.get(url + "/admin/backends", headers=ROOT_KEY)).json()["backends"]}


async def test_a_reload_keeps_the_running_stream_and_changes_backends_and_keys(
    tmp_path: Path, redis_url: str, prefix: str, sim_url: str
) -> None:
    config = tmp_path / "triage.yaml"
    with running_simulator(SimSettings(model=MODEL)) as slow:  # a realistic pace: the stream outlasts the reload
        first = {"name": "a", "url": slow, "models": [MODEL]}
        write(config, backends=[first], api_keys=keys("old", "kept"), reload_check_s=0.1)
        source = ConfigSource(config, {"redis_url": redis_url, "key_prefix": prefix})
        app = create_app(source.load(), source=source)
        with running_app(app) as url:
            async with httpx.AsyncClient(timeout=120) as http:
                body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 300,
                        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
                async with http.stream("POST", url + CHAT, json=body, headers={"authorization": "Bearer old"}) as s:
                    assert s.status_code == 200 and s.headers["x-triage-backend"] == "a"
                    chunks = s.aiter_bytes()
                    received = [await anext(chunks)]

                    # the reload: backend a out, b in; key "old" out
                    write(config, backends=[{"name": "b", "url": sim_url, "models": [MODEL]}],
                          api_keys=keys("kept"), reload_check_s=0.1)
                    await eventually(lambda: _backends_are(http, url, {"b"}), 20)
                    plain = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
                    assert (await http.post(url + CHAT, json=plain, headers={"authorization": "Bearer old"})
                            ).status_code == 401
                    moved = await http.post(url + CHAT, json={**plain, "max_tokens": 2},
                                            headers={"authorization": "Bearer kept"})
                    assert moved.status_code == 200 and moved.headers["x-triage-backend"] == "b"

                    async for chunk in chunks:  # the stream that started on "a" runs to its end
                        received.append(chunk)
                text = b"".join(received)
                assert text.rstrip().endswith(b"data: [DONE]")
                usage = [orjson.loads(line[6:]) for line in text.split(b"\n") if b'"usage":{' in line]
                assert usage[-1]["usage"]["completion_tokens"] == 300

                # a config that does not load changes nothing
                write(config, backends=[{"name": "c", "url": "ftp://nowhere"}])
                await eventually(lambda: app.state.reloader.failures == 1)
                assert (await http.post(url + CHAT, json={**plain, "max_tokens": 2},
                                        headers={"authorization": "Bearer kept"})).status_code == 200
                assert await backends_now(http, url) == {"b"}


async def test_a_reload_may_bring_a_new_pool(tmp_path: Path, redis_url: str, prefix: str, sim_url: str) -> None:
    config = tmp_path / "triage.yaml"
    first = {"name": "a", "url": sim_url, "models": [MODEL]}
    write(config, backends=[first], reload_check_s=0.1)
    source = ConfigSource(config, {"redis_url": redis_url, "key_prefix": prefix})
    with running_simulator(SimSettings(profile="fast", model="other-model")) as other:
        with running_app(create_app(source.load(), source=source)) as url:
            async with httpx.AsyncClient(timeout=60) as http:
                write(config, backends=[first, {"name": "o", "url": other, "models": ["other-model"], "pool": "p2"}],
                      reload_check_s=0.1)

                async def listed() -> bool:
                    models = (await http.get(url + "/v1/models")).json()["data"]
                    return {m["id"] for m in models} == {MODEL, "other-model"}

                await eventually(listed, 20)
                body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
                for model, backend in ((MODEL, "a"), ("other-model", "o")):
                    resp = await http.post(url + CHAT, json={**body, "model": model})
                    assert resp.status_code == 200 and resp.headers["x-triage-backend"] == backend, resp.text
                stats = (await http.get(url + "/admin/stats")).json()
                assert set(stats["queue"]["by_pool"]) == {"default", "p2"}  # its queue is watched too


async def _backends_are(http: httpx.AsyncClient, url: str, names: set[str]) -> bool:
    return await backends_now(http, url) == names


def test_sighup_reloads_a_real_process(tmp_path: Path, redis_url: str, prefix: str, sim_url: str) -> None:
    config, port = tmp_path / "triage.yaml", free_port()
    base = {"redis_url": redis_url, "key_prefix": prefix, "reload_check_s": 0, "request_log": True,
            "api_keys": keys("user")}
    write(config, backends=[{"name": "a", "url": sim_url, "models": [MODEL]}], **base)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
    log = (tmp_path / "out.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "triage", "serve", "--config", str(config), "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env={**env, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=30) as http:
            _wait(lambda: _get(http, url + "/ready") == 200, proc, log)
            write(config, backends=[{"name": "a", "url": sim_url, "models": [MODEL]},
                                    {"name": "b", "url": sim_url, "models": [MODEL]}], **{**base, "api_keys": keys()})
            proc.send_signal(signal.SIGHUP)

            def both() -> bool:
                found = http.get(url + "/admin/backends", headers=ROOT_KEY).json()["backends"]
                return {b["name"] for b in found} == {"a", "b"}

            _wait(both, proc, log)
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            assert http.post(url + CHAT, json=body, headers={"authorization": "Bearer user"}).status_code == 401
            assert http.post(url + CHAT, json=body, headers=ROOT_KEY).status_code == 200
            assert proc.poll() is None  # SIGHUP did not stop it
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    # request_log on: one JSON line per request on stdout (the refused one has no tenant yet)
    lines = [orjson.loads(line) for line in Path(log.name).read_text().splitlines() if line.startswith('{"time"')]
    assert [(line["tenant"], line["status"], line["outcome"]) for line in lines] == [
        ("", 401, "invalid_api_key"), ("ops", 200, "ok")]


def _get(http: httpx.Client, url: str) -> int:
    try:
        return http.get(url, timeout=1).status_code
    except httpx.HTTPError:
        return 0


def _wait(condition: Callable[[], bool], proc: subprocess.Popen[bytes], log: Any, within_s: float = 60) -> None:
    import time

    deadline = time.monotonic() + within_s
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(Path(log.name).read_text()[-3000:])
        time.sleep(0.05)
