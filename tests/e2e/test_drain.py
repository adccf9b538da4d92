"""Graceful drain, on real processes: ``triage serve`` children get SIGTERM by PID and are
watched over real HTTP. The backend is a real HTTP server whose streams end only when
the test lets them (so "running" and "queued" are states, not timings)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import pytest
import yaml
from redis.asyncio import Redis

from gateway.server.embedded import free_port
from scheduler.queue.keys import PoolKeys
from scheduler.queue.readback import backend_states
from tests.support import MODEL, eventually

MODELS = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})


def _event(content: str | None = None, usage: bool = False) -> bytes:
    if usage:
        data = {"id": "x", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
    elif content is None:
        data = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    else:
        data = {"id": "x", "choices": [{"index": 0, "delta": {"content": content}}]}
    return b"data: " + orjson.dumps(data) + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


@dataclass
class GatedBackend:
    """Streams one token at once, the rest once ``release()`` is called; records the
    streams the gateway closed before their end."""

    url: str = ""
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    started: int = 0
    closed_early: int = 0
    _gate: asyncio.Event | None = None

    def release(self) -> None:
        assert self._gate is not None
        self.loop.call_soon_threadsafe(self._gate.set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET"):  # probes: the model list
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                                 % len(MODELS) + MODELS)
                    await writer.drain()
                    continue
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                await self._stream(reader, writer)
                break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._gate is not None
        self.started += 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     + _chunk(_event("Hello")))
        await writer.drain()
        gate = asyncio.ensure_future(self._gate.wait())
        gone = asyncio.ensure_future(reader.read())  # b"" once the gateway closes the connection
        await asyncio.wait({gate, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not gate.done():
            gate.cancel()
            self.closed_early += 1
            return
        gone.cancel()
        body = _event(" world") + _event() + _event(usage=True) + b"data: [DONE]\n\n"
        writer.write(_chunk(body) + b"0\r\n\r\n")
        await writer.drain()


@pytest.fixture
def gated() -> Iterator[GatedBackend]:
    backend = GatedBackend()

    async def start() -> asyncio.Server:
        backend._gate = asyncio.Event()
        return await asyncio.start_server(backend.handle, "127.0.0.1", 0)

    server = backend.loop.run_until_complete(start())
    backend.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    thread = threading.Thread(target=backend.loop.run_forever, daemon=True)
    thread.start()
    yield backend
    backend.loop.call_soon_threadsafe(server.close)
    backend.loop.call_soon_threadsafe(backend.loop.stop)
    thread.join(timeout=5)


@dataclass
class Replica:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    async def exited(self, within_s: float = 60) -> int:
        try:
            return await asyncio.to_thread(self.proc.wait, within_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the gateway did not exit within {within_s} s:\n{self.log.read_text()}") from None


Start = Callable[..., Awaitable[Replica]]  # start(slots=1, **settings): a ready `triage serve` child


@pytest.fixture
async def replica(
    tmp_path: Path, redis_url: str, redis: Redis, prefix: str, gated: GatedBackend
) -> AsyncIterator[Start]:
    started: list[Replica] = []

    async def start(slots: int = 1, **settings: object) -> Replica:
        port = free_port()
        config = {
            "port": port, "redis_url": redis_url, "key_prefix": prefix, "predictor": "prior",
            "backends": [{"name": "gated", "url": gated.url, "models": [MODEL], "max_concurrency": slots,
                          "adaptive": False}],
            **settings,
        }
        path = tmp_path / f"triage-{port}.yaml"
        path.write_text(yaml.safe_dump(config))
        log = tmp_path / f"gateway-{port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
        with log.open("wb") as out:  # the child keeps its own copy
            proc = await asyncio.to_thread(
                subprocess.Popen, [sys.executable, "-m", "triage", "serve", "--config", str(path)],
                stdout=out, stderr=subprocess.STDOUT, env={**env, "PYTHONUNBUFFERED": "1"},
            )
        r = Replica(proc, f"http://127.0.0.1:{port}", log)
        started.append(r)

        async def ready() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                async with httpx.AsyncClient(timeout=2) as http:
                    return (await http.get(f"{r.url}/ready")).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(ready, within_s=60)
        workers = int(settings.get("workers", 1))  # type: ignore[call-overload]
        if workers > 1:  # /ready proves one worker up; each registers as a replica once it serves
            owners = PoolKeys(prefix, "default").owners
            await eventually(lambda: _registered(redis, owners, workers), within_s=60, every_s=0.1)
        return r

    yield start
    for r in started:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait(timeout=10)


async def _registered(redis: Redis, owners: str, want: int) -> bool:
    return int(await redis.zcard(owners)) >= want


def chat(stream: bool) -> dict[str, object]:
    body: dict[str, object] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def leases(redis: Redis, prefix: str) -> int:
    states = await backend_states(redis, PoolKeys(prefix, "default"))
    return sum(b.busy for b in states.values())


async def queued_here(http: httpx.AsyncClient, url: str) -> int:
    return int((await http.get(f"{url}/admin/stats")).json()["queue"]["queued_here"])


async def test_sigterm_drains_a_running_stream_and_hands_queued_work_back(
    replica: Start, gated: GatedBackend, redis: Redis, prefix: str
) -> None:
    gw = await replica(drain_timeout_s=60)
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
        async with http.stream("POST", "/v1/chat/completions", json=chat(stream=True)) as running:
            assert running.status_code == 200
            lines = running.aiter_lines()
            assert "Hello" in await anext(line async for line in lines if line.startswith("data:"))
            queued = asyncio.ensure_future(http.post("/v1/chat/completions", json=chat(stream=False)))
            await eventually(lambda: queued_here(http, gw.url), within_s=30)  # one ticket waits for the slot

            os.kill(gw.proc.pid, signal.SIGTERM)

            handed = await queued  # handed back: a clear 503, retry elsewhere
            assert handed.status_code == 503, handed.text
            assert handed.json()["error"]["code"] == "draining"
            assert int(handed.headers["retry-after"]) >= 1
            ready = await http.get("/ready")  # still listening: 503, not a refused connection
            assert ready.status_code == 503 and ready.json()["draining"] is True
            new = await http.post("/v1/chat/completions", json=chat(stream=False))
            assert new.status_code == 503 and new.json()["error"]["type"] == "service_unavailable"
            assert new.json()["error"]["code"] == "draining" and "retry-after" in new.headers
            assert (await http.get("/health")).status_code == 200
            assert gw.proc.poll() is None  # the stream still runs
            assert await leases(redis, prefix) == 1

            gated.release()
            rest = [line async for line in lines if line.startswith("data:")]
    assert rest[-1] == "data: [DONE]" and any("world" in line for line in rest)
    assert await gw.exited() == 0
    assert await leases(redis, prefix) == 0
    assert gated.started == 1 and gated.closed_early == 0
    log = gw.log.read_text()
    assert "handed 1 queued request(s) back" in log and "Traceback" not in log, log


async def test_streams_past_drain_timeout_end_with_an_error_and_release_their_leases(
    replica: Start, gated: GatedBackend, redis: Redis, prefix: str
) -> None:
    gw = await replica(slots=2, drain_timeout_s=1)
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
        async with http.stream("POST", "/v1/chat/completions", json=chat(stream=True)) as running:
            lines = running.aiter_lines()
            await anext(line async for line in lines if "Hello" in line)
            whole = asyncio.ensure_future(http.post("/v1/chat/completions", json=chat(stream=False)))
            await eventually(lambda: gated.started == 2)  # both calls are on the backend
            assert await leases(redis, prefix) == 2
            os.kill(gw.proc.pid, signal.SIGTERM)
            rest = [line async for line in lines if line.startswith("data:")]
            cut = await whole
    assert "data: [DONE]" not in rest  # the stream ends with an error event
    error = orjson.loads(rest[-1].removeprefix("data: "))["error"]
    assert error["code"] == "draining" and "drain_timeout_s" in error["message"]
    assert cut.status_code == 503 and cut.json()["error"]["code"] == "draining"  # nothing sent yet: a 503
    assert await gw.exited() == 0
    assert await leases(redis, prefix) == 0
    await eventually(lambda: gated.closed_early == 2)  # the upstream calls were closed too
    log = gw.log.read_text()
    assert "still running after 1 s" in log and "Traceback" not in log, log


async def test_an_idle_replica_exits_at_once(replica: Start) -> None:
    idle = await replica()
    os.kill(idle.proc.pid, signal.SIGTERM)
    assert await idle.exited() == 0


def _accept_queue(port: int) -> int:
    """Connections the kernel completed on ``port``'s listening socket that its server has
    not accepted yet (a listening socket's rx_queue in /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":
            return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"nothing listens on port {port}")


async def test_a_connection_accepted_before_the_drain_ended_is_answered(replica: Start) -> None:
    """An idle replica finishes its drain at once (with ``--workers``, while a sibling on the same
    socket still streams). A connection it had already accepted, whose request comes only now,
    gets the 503 ``draining`` — not a socket closed without an answer."""
    gw = await replica()
    port = int(gw.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await eventually(lambda: _accept_queue(port) == 0, within_s=30)  # the server holds it now
        os.kill(gw.proc.pid, signal.SIGTERM)
        try:
            await eventually(lambda: "waiting for 1 accepted connection(s)" in gw.log.read_text(), within_s=30)
        except AssertionError:
            raise AssertionError(f"the replica never waited for the accepted connection:\n{gw.log.read_text()}") from None
        body = orjson.dumps(chat(stream=False))
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n" % len(body) + body)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        answer = orjson.loads(await asyncio.wait_for(reader.readexactly(length), 30))
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 503"), head
    assert answer["error"]["code"] == "draining", answer
    assert await gw.exited() == 0
    assert "Traceback" not in gw.log.read_text()


def _fresh(url: str) -> httpx.AsyncClient:
    """A client whose every request opens a new connection: the kernel hands each to either worker."""
    return httpx.AsyncClient(base_url=url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0))


async def _draining_everywhere(url: str) -> bool:
    """Every worker a new connection reaches says it is not ready (it drains). Asked with
    ``/ready``, not with work: a worker the signal has not reached yet would take it."""
    async with _fresh(url) as http:
        return all([(await http.get("/ready")).status_code == 503 for _ in range(8)])


async def _refused_everywhere(url: str) -> None:
    async with _fresh(url) as http:
        for _ in range(6):
            answer = await http.post("/v1/chat/completions", json=chat(stream=False))
            assert answer.status_code == 503 and answer.json()["error"]["code"] == "draining", answer.text


@contextlib.asynccontextmanager
async def _workers_draining_with_a_stream(gw: Replica) -> AsyncIterator[AsyncIterator[str]]:
    """A stream running (on one of the workers), then SIGTERM (to their supervisor), until
    every worker drains: the stream's lines to come."""
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
        async with http.stream("POST", "/v1/chat/completions", json=chat(stream=True)) as running:
            lines = running.aiter_lines()
            await anext(line async for line in lines if "Hello" in line)
            os.kill(gw.proc.pid, signal.SIGTERM)
            await eventually(lambda: _draining_everywhere(gw.url), within_s=30)
            yield lines


async def test_every_worker_drains_on_sigterm(
    replica: Start, gated: GatedBackend, redis: Redis, prefix: str
) -> None:
    """``--workers 2``: the supervisor's SIGTERM reaches each worker, which drains as a single
    process does: new work refused on every worker, the running stream completed, then exit."""
    gw = await replica(slots=2, drain_timeout_s=60, workers=2)
    async with _workers_draining_with_a_stream(gw) as lines:
        await _refused_everywhere(gw.url)
        assert gw.proc.poll() is None and await leases(redis, prefix) == 1  # the stream still runs
        gated.release()
        rest = [line async for line in lines if line.startswith("data:")]
    assert rest[-1] == "data: [DONE]" and any("world" in line for line in rest)
    assert await gw.exited() == 0
    assert await leases(redis, prefix) == 0
    log = gw.log.read_text()
    assert log.count("draining (a second signal ends the running requests now)") == 2, log  # both workers
    assert "Traceback" not in log, log


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_second_sigterm_ends_the_running_streams(replica: Start, gated: GatedBackend, workers: int) -> None:
    gw = await replica(slots=2, drain_timeout_s=600, workers=workers)
    async with _workers_draining_with_a_stream(gw) as lines:
        os.kill(gw.proc.pid, signal.SIGTERM)  # do not wait for the stream
        rest = [line async for line in lines if line.startswith("data:")]
        assert await gw.exited(within_s=60) == 0
    assert orjson.loads(rest[-1].removeprefix("data: "))["error"]["code"] == "draining"
    log = gw.log.read_text()
    assert "stopped by a second signal" in log and "Traceback" not in log, log
