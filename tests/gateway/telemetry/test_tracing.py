"""One request as the telemetry sees it: spans in the GenAI shape, and the numbers the
same calls leave in the metrics, the stats window and the request log."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from redis.asyncio import Redis

from gateway.schemas import Endpoint, InferenceRequest, parse
from gateway.telemetry import semconv as sc
from gateway.telemetry.accuracy import RankAccuracy
from gateway.telemetry.metrics import Instruments
from gateway.telemetry.request_log import RequestLog
from gateway.telemetry.stats import WindowStats
from gateway.telemetry.stream_stats import StreamStats
from gateway.telemetry.tracing import Recorder, Reply, RequestTrace
from scheduler.backends.backend import BackendConfig
from scheduler.backends.registry import BackendRegistry
from scheduler.queue.depth import QueueDepth
from scheduler.types import (
    Grant,
    LengthClass,
    Outcome,
    Placement,
    Prediction,
    PredictionSource,
    QueueOrder,
    Ticket,
)

BACKEND = BackendConfig("b1", "http://10.0.0.7:8001", "p", 4, ("m",))


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(orjson.loads(record.getMessage()))


@dataclass
class World:
    recorder: Recorder
    spans: InMemorySpanExporter
    instruments: Instruments
    stats: WindowStats
    accuracy: RankAccuracy
    log: Lines

    def trace(self) -> RequestTrace:
        return RequestTrace(self.recorder, "chat", "/v1/chat/completions", None)

    def span(self, kind: SpanKind) -> list:
        return [s for s in self.spans.get_finished_spans() if s.kind is kind]


@pytest.fixture
def world(redis: Redis, prefix: str) -> World:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    registry = BackendRegistry([BACKEND], probe=None, dispatcher=None, probe_interval_s=60)  # type: ignore[arg-type]
    accuracy, stats = RankAccuracy(), WindowStats(classes=("short", "medium", "long"))
    instruments = Instruments(registry, QueueDepth(redis, prefix, {"p"}), accuracy)
    logger = logging.getLogger(f"test.tracing.{prefix}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    lines = Lines()
    logger.addHandler(lines)
    recorder = Recorder(
        provider.get_tracer("test"), TraceContextTextMapPropagator(), instruments, stats, accuracy,
        lambda b: ("10.0.0.7", 8001), policy="short_first", capture_content=True, request_log=RequestLog(logger),
    )
    return World(recorder, spans, instruments, stats, accuracy, lines)


def admitted(trace: RequestTrace, max_tokens: int | None = None, source: PredictionSource = PredictionSource.LEARNED) -> InferenceRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi there"}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    req = parse(orjson.dumps(body), Endpoint.CHAT, 100_000)
    placement = Placement(Prediction(20, 40, source), LengthClass.SHORT, QueueOrder(1.0, 0.0, 0.1))
    ticket = Ticket("req-1", "m", "t1", "short", 20, 0.0, "interactive", 1.0)
    trace.principal("req-1", "t1", "key_1")
    trace.enqueued(req, placement, ticket, "p")
    return req


def test_a_served_request_leaves_spans_metrics_stats_and_one_log_line(world: World) -> None:
    trace = world.trace()
    req = admitted(trace)
    trace.dispatched(Grant("req-1", "p", "b1", 0.25))
    call = trace.call(BACKEND, req)
    reply = Reply.from_stream(StreamStats(first_chunk_at=time.monotonic(), usage={"prompt_tokens": 5, "completion_tokens": 40}))
    trace.call_done(call, 40, True, 200, 0.02, reply)
    trace.end(200)
    trace.end(500)  # once: a second end changes nothing

    (server,), (queue,), (client,) = world.span(SpanKind.SERVER), world.span(SpanKind.INTERNAL), world.span(SpanKind.CLIENT)
    assert server.name == "POST /v1/chat/completions" and queue.name == "triage.queue" and client.name == "chat m"
    assert queue.parent.span_id == server.context.span_id == client.parent.span_id
    assert call.headers["traceparent"].split("-")[2] == format(client.context.span_id, "016x")  # sent upstream
    assert [e.name for e in server.events] == [sc.EV_ENQUEUED, sc.EV_DISPATCHED, sc.EV_FIRST_TOKEN]
    assert server.attributes[sc.CLASS] == "short" and server.attributes[sc.TENANT] == "t1"
    assert server.attributes[sc.QUEUE_MS] == 250.0 and server.attributes[sc.HTTP_STATUS] == 200
    assert server.status.status_code is StatusCode.UNSET
    assert client.attributes[sc.SERVER_ADDRESS] == "10.0.0.7" and client.attributes[sc.SERVER_PORT] == 8001
    assert client.attributes[sc.OUTPUT_TOKENS] == 40 and client.attributes[sc.INPUT_TOKENS] == 5
    assert orjson.loads(client.attributes[sc.INPUT_MESSAGES]) == [{"role": "user", "content": "hi there"}]

    ins = world.instruments
    assert ins.requests.series == {("chat", "openai", "m", "short", "b1", Outcome.OK): 1}
    assert ins.admission.series == {(Outcome.ADMITTED, "short"): 1}
    assert ins.output_tokens.series == {("chat", "openai", "m", "short", "b1"): 40}
    assert ins.queue_wait.series[("p", "short", "interactive")].count == 1
    assert ins.ttft.series[("chat", "openai", "m", "short", "b1")].count == 1
    assert ins.predictor_error.series[("m", "learned")].sum == 2.0  # 40 actual over 20 predicted
    assert len(world.accuracy) == 1
    assert world.stats.snapshot()["short"]["requests"] == 1
    (line,) = world.log.lines
    assert (line["outcome"], line["status"], line["output_tokens"], line["input_tokens"]) == ("ok", 200, 40, 5)
    assert (line["tenant"], line["key_id"], line["backend"], line["predicted_tokens"]) == ("t1", "key_1", "b1", 20)


def test_with_tracing_off_no_span_is_made_nor_sent_upstream_and_the_numbers_are_the_same(world: World) -> None:
    """(A client's own trace context still passes through: tests/e2e/observability/test_traces.py.)"""
    world.recorder = dataclasses.replace(world.recorder, tracing=False)
    trace = world.trace()
    req = admitted(trace)
    trace.dispatched(Grant("req-1", "p", "b1", 0.25))
    call = trace.call(BACKEND, req)
    reply = Reply.from_stream(StreamStats(first_chunk_at=time.monotonic(), usage={"prompt_tokens": 5, "completion_tokens": 40}))
    trace.call_done(call, 40, False, 502, None, reply)  # a failed call: its span's error goes nowhere
    trace.end(502, "upstream_error")

    assert world.spans.get_finished_spans() == () and call.headers == {}
    assert not trace.span.is_recording() and not call.span.is_recording()
    ins = world.instruments
    assert ins.requests.series == {("chat", "openai", "m", "short", "b1", Outcome.ERROR): 1}
    assert ins.admission.series == {(Outcome.ADMITTED, "short"): 1}
    assert ins.queue_wait.series[("p", "short", "interactive")].count == 1
    (line,) = world.log.lines
    assert (line["outcome"], line["status"]) == ("upstream_error", 502)


def test_a_refused_request_is_counted_as_such(world: World) -> None:
    trace = world.trace()
    admitted(trace)
    trace.refused(Outcome.QUEUE_FULL)
    trace.end(429, "queue_full")

    (queue,) = world.span(SpanKind.INTERNAL)
    assert queue.status.status_code is StatusCode.ERROR and queue.attributes[sc.OUTCOME] == "queue_full"
    assert world.instruments.admission.series == {(Outcome.QUEUE_FULL, "short"): 1}
    assert world.instruments.requests.series == {("chat", "openai", "m", "short", "", Outcome.REJECTED): 1}
    assert world.stats.snapshot()["short"]["rejections"] == 1
    assert world.log.lines[0]["outcome"] == "queue_full"


def test_a_client_that_leaves_while_queued_cancels(world: World) -> None:
    trace = world.trace()
    admitted(trace)
    trace.end(499, Outcome.CLIENT_GONE)

    (queue,) = world.span(SpanKind.INTERNAL)
    assert queue.attributes[sc.OUTCOME] == "cancelled"
    assert world.instruments.admission.series == {(Outcome.CANCELLED, "short"): 1}
    assert world.instruments.requests.series == {("chat", "openai", "m", "short", "", Outcome.CLIENT_GONE): 1}
    assert world.stats.snapshot()["short"]["requests"] == 0 and world.stats.snapshot()["short"]["errors"] == 0


@pytest.mark.parametrize(
    ("max_tokens", "source", "learned"),
    [(40, PredictionSource.LEARNED, False), (None, PredictionSource.CAP, False), (None, PredictionSource.PRIOR, True)],
)
def test_only_replies_that_ended_on_their_own_grade_the_predictor(
    world: World, max_tokens: int | None, source: PredictionSource, learned: bool
) -> None:
    trace = world.trace()
    req = admitted(trace, max_tokens=max_tokens, source=source)
    trace.dispatched(Grant("req-1", "p", "b1", 0.0))
    trace.call_done(trace.call(BACKEND, req), 40, True, 200, None, Reply.from_body(b"{}"))
    assert (len(world.accuracy) == 1) is learned
    assert bool(world.instruments.predictor_error.series) is learned


def test_a_failed_call_marks_its_span_and_learns_nothing(world: World) -> None:
    trace = world.trace()
    req = admitted(trace)
    trace.dispatched(Grant("req-1", "p", "b1", 0.0))
    trace.call_done(trace.call(BACKEND, req), None, False, 200, None, None)
    trace.call_done(None, None, False, 200, None, None)  # no call open: nothing to end
    (client,) = world.span(SpanKind.CLIENT)
    assert client.status.status_code is StatusCode.ERROR and client.attributes[sc.ERROR_TYPE] == "upstream_error"
    assert world.instruments.output_tokens.series == {}


@pytest.mark.parametrize(
    ("body", "usage", "reasons", "model"),
    [
        (b'{"model": "m2", "choices": [{"finish_reason": "stop"}, {"finish_reason": "length"}], '
         b'"usage": {"completion_tokens": 3}}', {"completion_tokens": 3}, ("stop", "length"), "m2"),
        (b"not json", None, (), None),
        (b"[1, 2]", None, (), None),
        (b'{"usage": "lots", "choices": "none", "model": 7}', None, (), None),
    ],
)
def test_a_whole_reply_is_read_once_and_defensively(body: bytes, usage: dict | None, reasons: tuple, model: str | None) -> None:
    reply = Reply.from_body(body)
    assert (reply.usage, reply.finish_reasons, reply.response_model) == (usage, reasons, model)
    assert reply.tokens("completion_tokens") == (usage or {}).get("completion_tokens")
