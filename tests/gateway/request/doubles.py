"""What the request tests drive the gateway's request side with: a real backend double
on loopback (a small Starlette app whose behaviour each backend names in its URL, and a
raw TCP server that hangs up before answering), an in-process fake ``Job`` that keeps the
real one's once-only rules and records what it is told, and a real ``RequestTrace``
whose spans land in memory."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route as HttpRoute

from gateway.request.context import Principal, RequestContext
from gateway.schemas import Endpoint, InferenceRequest, parse
from gateway.telemetry.hub import OtelConfig, Telemetry, TelemetrySettings
from scheduler.backends.backend import BackendConfig
from scheduler.errors import BackendOverloaded, SchedulerError
from scheduler.job import Route
from scheduler.types import (
    CallResult,
    Grant,
    LengthClass,
    Placement,
    Prediction,
    PredictionSource,
    QueueOrder,
    RateLimits,
    Ticket,
)

MODEL = "m"
USAGE = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
ANSWER = orjson.dumps({
    "id": "cmpl-1", "object": "chat.completion", "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
    "usage": USAGE,
})


def event(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


ROLE = event({"id": "s", "created": 1, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
HELLO = event({"id": "s", "created": 1, "choices": [{"index": 0, "delta": {"content": "Hello"}}]})
FINISH = event({"id": "s", "created": 1, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
USAGE_ONLY = event({"id": "s", "created": 1, "choices": [], "usage": USAGE})
DONE = b"data: [DONE]\n\n"
STREAM = [ROLE, HELLO, FINISH, USAGE_ONLY, DONE]
TRACEBACK_BODY = b'Traceback (most recent call last):\n  File "/srv/engine.py", line 3\nValueError: secret /srv path'


@dataclass
class Seen:
    """One request the backend double got."""

    mode: str
    path: str
    headers: dict[str, str]
    body: bytes


def backend_app() -> tuple[Starlette, list[Seen]]:
    """The backend double. A backend's URL ends in its mode, e.g. ``{base}/ok``:

    ``ok``        a whole chat answer with usage (streamed as SSE when asked)
    ``busy429``   429 with ``Retry-After: 2`` and an OpenAI error body
    ``busy503``   503 without ``Retry-After``
    ``bad400``    400 whose body is a traceback (a server's internals)
    ``hang``      a stream that sends its first event and then nothing
    ``part``      a stream that sends its role and one token, and then nothing (to be paused)
    """
    seen: list[Seen] = []

    async def handle(request: Request) -> Response:
        mode = request.path_params["mode"]
        body = await request.body()
        seen.append(Seen(mode, request.url.path, dict(request.headers), body))
        stream = bool(orjson.loads(body).get("stream"))
        if mode == "busy429":
            error = orjson.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}})
            return Response(error, 429, headers={"retry-after": "2"}, media_type="application/json")
        if mode == "busy503":
            return Response(b'{"error": {"message": "full"}}', 503, media_type="application/json")
        if mode == "bad400":
            return Response(TRACEBACK_BODY, 400, media_type="text/plain")
        if mode in ("hang", "part"):
            async def hang() -> AsyncIterator[bytes]:
                yield ROLE if mode == "hang" else ROLE + HELLO
                await asyncio.Event().wait()  # until the gateway closes the stream

            return StreamingResponse(hang(), media_type="text/event-stream")
        if stream:
            async def chunks() -> AsyncIterator[bytes]:
                for chunk in STREAM:
                    yield chunk

            return StreamingResponse(chunks(), media_type="text/event-stream")
        return Response(ANSWER, media_type="application/json")

    routes = [HttpRoute(f"/{{mode}}{e.value}", handle, methods=["POST"]) for e in Endpoint]
    return Starlette(routes=routes), seen


class HangUp:
    """A TCP server that reads a request and closes the connection without answering:
    a backend that fails before the first byte."""

    def __init__(self) -> None:
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        writer.close()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


def backend(name: str, url: str, api_key: str | None = None) -> BackendConfig:
    return BackendConfig(name=name, url=url, pool="default", max_concurrency=4, models=(MODEL,), api_key=api_key)


# -- the scheduler's side ------------------------------------------------------------------


@dataclass
class FakeJob:
    """A ``Job`` as the gateway sees it. Each grant it hands out is the next backend of
    ``backends``; like the real job, a part ends once per grant and the request once.
    ``retry``: ``failed()`` hands out the next grant (else None, a 502); ``give_up``: the
    ``BackendOverloaded`` that ``back_off`` raises (else it hands out the next grant)."""

    backends: list[BackendConfig]
    retry: bool = True
    give_up: BackendOverloaded | None = None
    start_done: bool = True  # the grant came in the enqueue's reply
    back_off_done: bool = True  # queued again, it is granted at once
    evicted: SchedulerError | None = None  # queued again, it is evicted with this instead
    pause_evicted: SchedulerError | None = None  # paused, its continuation is evicted with this
    positions: list[int | None] = field(default_factory=lambda: [3])
    rate: float = 2.0
    rate_limits: RateLimits | None = None
    may_pause: bool = False
    queued_s: float = 0.25
    # what it was told, in order
    events: list[tuple[Any, ...]] = field(default_factory=list)
    on_end_part: Callable[[], None] | None = None  # runs as a part ends (checks order)
    quantum: int = 0  # output tokens a part makes before it may be paused
    pause_reason: str = "wait=1.000,cost=0.100"  # what the scheduler told of its last pause

    def __post_init__(self) -> None:
        self._next = deque(self.backends)
        self.placement = Placement(
            Prediction(10, 20, PredictionSource.PRIOR), LengthClass.SHORT, QueueOrder(0.0, 0.0, 0.0)
        )
        self.ticket = Ticket("req-1", MODEL, "t1", "short", 10, 0.0, "interactive", 0.0)
        self.pool = "default"
        self.grant: Grant | None = None
        self.route: Route | None = None
        self.waits: list[asyncio.Future[Grant]] = []  # every future of a grant it handed out
        self._part_over = True
        self._finished = False

    @property
    def cls(self) -> str:
        return self.placement.cls.value

    # what the real job does with each grant
    def _take(self) -> Grant:
        config = self._next.popleft()
        self.grant = Grant(self.ticket.id, self.pool, config.name, self.queued_s)
        self.route = Route(config, None)
        self._part_over = False
        return self.grant

    def grant_now(self) -> None:
        """Grant the last pending wait (a test's way of letting the queue move)."""
        self.waits[-1].set_result(self._take())

    def _wait(self, done: bool) -> asyncio.Future[Grant]:
        future: asyncio.Future[Grant] = asyncio.get_running_loop().create_future()
        if done:
            future.set_result(self._take())
        self.waits.append(future)
        return future

    async def start(self) -> asyncio.Future[Grant]:
        self.events.append(("start",))
        return self._wait(self.start_done)

    def failed(self) -> asyncio.Future[Grant] | None:
        self.events.append(("failed",))
        self.end_part(CallResult.failed())
        return self._wait(True) if self.retry and self._next else None

    async def back_off(self, status: int, cool_s: float) -> asyncio.Future[Grant]:
        self.events.append(("back_off", status, cool_s))
        self.end_part(CallResult(False, status))
        if self.give_up is not None:
            raise self.give_up
        if self.evicted is not None:
            future: asyncio.Future[Grant] = asyncio.get_running_loop().create_future()
            future.set_exception(self.evicted)
            return future
        return self._wait(self.back_off_done)

    # pausing: ``pause_now()`` is the dispatch script giving its slot away
    def watch(self, progress: Callable[[], int | None], on_pause: Callable[[], None], tokens: int) -> int:
        self.events.append(("watch", self.grant.backend if self.grant else None, tokens))
        self._on_pause = on_pause
        return self.quantum

    def pause_now(self) -> None:
        self._on_pause()

    def passed_quantum(self, tokens: int) -> None:
        self.events.append(("passed_quantum", tokens))

    async def pause(self) -> asyncio.Future[Grant]:
        self.events.append(("pause",))
        self.end_part(CallResult.client_gone())
        if self.pause_evicted is not None:  # its continuation is refused while it waits
            future: asyncio.Future[Grant] = asyncio.get_running_loop().create_future()
            future.set_exception(self.pause_evicted)
            return future
        return self._wait(True)

    def end_part(self, result: CallResult) -> None:
        if self._part_over or self.grant is None:
            return
        self._part_over = True
        if self.on_end_part is not None:
            self.on_end_part()
        self.events.append(("end_part", self.grant.backend, result))

    def finish(self, result: CallResult, usage: dict[str, int] | None) -> None:
        self.end_part(result)
        if self._finished:
            return
        self._finished = True
        self.events.append(("finish", result, usage))

    def explain(self, exc: SchedulerError) -> SchedulerError:
        return exc

    async def position(self) -> int | None:
        return self.positions.pop(0) if len(self.positions) > 1 else self.positions[0]

    def drain_rate(self) -> float:
        return self.rate

    def told(self, kind: str) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] == kind]


class FakeScheduler:
    """``Scheduler.admit`` handing out one prepared job, and what it was asked."""

    def __init__(self, job: FakeJob | None = None, refuse: SchedulerError | None = None) -> None:
        self.job, self.refuse = job, refuse
        self.admitted: list[tuple[Any, Any]] = []

    async def admit(self, inp: Any, spec: Any) -> FakeJob:
        self.admitted.append((inp, spec))
        if self.refuse is not None:
            raise self.refuse
        assert self.job is not None
        return self.job


# -- the request's side --------------------------------------------------------------------


class Traced:
    """A real ``Telemetry`` for the given backends; spans land in ``spans``."""

    def __init__(self, configs: list[BackendConfig], redis: Any, prefix: str) -> None:
        from scheduler.backends.registry import BackendRegistry

        self.spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.spans))
        # the registry is read only for gauges here: it never probes nor dispatches
        registry = BackendRegistry(configs, probe=None, dispatcher=None, probe_interval_s=60)  # type: ignore[arg-type]
        self.telemetry = Telemetry(
            TelemetrySettings(prefix, "triage"), registry, redis, otel=OtelConfig(), tracer_provider=provider
        )

    def context(self, route: Endpoint = Endpoint.CHAT, client_id: str | None = None, timeout_s: float = 0.0) -> RequestContext:
        from starlette.datastructures import Headers

        trace = self.telemetry.begin(Headers({}), route.operation, route.value)
        return RequestContext(
            request_id="req-1", principal=Principal("t1", "interactive", False), tier="interactive", hint=None,
            oracle_tokens=None, timeout_s=timeout_s, trace=trace, arrived=time.monotonic(),
            client_request_id=client_id,
        )

    def finished(self, kind_name: str | None = None) -> list[Any]:
        spans = list(self.spans.get_finished_spans())
        return [s for s in spans if kind_name is None or s.kind.name == kind_name]


def chat(stream: bool = False, **extra: Any) -> InferenceRequest:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream, **extra}
    return parse(orjson.dumps(body), Endpoint.CHAT, 100_000)


class Client:
    """The client's side of one ASGI request: ``receive`` gives nothing until ``leave()``
    (then ``http.disconnect``); ``send`` collects the response."""

    def __init__(self, on_body: Callable[[bytes], Awaitable[None] | None] | None = None) -> None:
        self._left = asyncio.Event()
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.blocks: list[bytes] = []
        self.ended = False
        self._on_body = on_body

    def leave(self) -> None:
        self._left.set()

    async def receive(self) -> dict[str, Any]:
        await self._left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.decode(): v.decode() for k, v in message["headers"]}
            return
        if message.get("body"):
            self.blocks.append(message["body"])
            if self._on_body is not None:
                result = self._on_body(message["body"])
                if result is not None:
                    await result
        if not message.get("more_body", False):
            self.ended = True

    @property
    def body(self) -> bytes:
        return b"".join(self.blocks)

    def request(self) -> Request:
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [], "query_string": b""}
        return Request(scope, self.receive)

    async def run(self, response: Response) -> None:
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
        await response(scope, self.receive, self.send)
