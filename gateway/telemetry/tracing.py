"""One request as the telemetry sees it: its spans, and the numbers it leaves behind.

Spans (GenAI conventions, see ``semconv.py``)::

    POST /v1/chat/completions     SERVER   the whole request, in the client's trace when it
     │                                      sent a ``traceparent``; events: enqueued,
     │                                      dispatched, first_token
     ├── triage.queue             INTERNAL  enqueue -> grant (or refusal, eviction, cancel)
     └── chat {model}             CLIENT    the call to the backend, one per attempt; its
                                            context travels upstream as ``traceparent``

``RequestTrace`` is created by the route (``Telemetry.begin``) and carried in the
request's context. It records into a ``Recorder``: the tracer and every sink a request
leaves numbers in, handed down by ``Telemetry`` (this module never sees it). The
proxy tells it what happened (``enqueued``, ``refused``, ``dispatched``, ``call``,
``call_done``) and the route or the end of the stream calls ``end`` once. Metrics
and the stats window are recorded from the same calls, so spans and numbers agree.
Nothing here parses the stream: the relay's ``StreamStats`` and the backend's usage
chunk already hold what is needed (finish reasons are known for whole answers only).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import SpanKind, Status, StatusCode

from gateway.schemas import InferenceRequest
from gateway.telemetry import semconv as sc
from gateway.telemetry.accuracy import RankAccuracy, ratio
from gateway.telemetry.metrics import Instruments
from gateway.telemetry.request_log import RequestLine, RequestLog
from gateway.telemetry.stats import WindowStats
from gateway.telemetry.stream_stats import StreamStats
from scheduler.backends.backend import BackendConfig
from scheduler.types import Grant, Outcome, Placement, PredictionSource, Ticket


def wall_ns(monotonic_s: float) -> int:
    """A ``time.monotonic()`` reading as epoch nanoseconds, for span event timestamps."""
    return time.time_ns() - int((time.monotonic() - monotonic_s) * 1e9)


@dataclass(slots=True)
class Reply:
    """What the backend's answer told us, read once: usage, finish reasons, timing."""

    usage: dict[str, Any] | None = None
    finish_reasons: tuple[str, ...] = ()
    response_model: str | None = None
    first_token_at: float | None = None  # monotonic; streams only
    output: Any = None  # the choices, kept only when content capture is on

    @classmethod
    def from_body(cls, content: bytes) -> Reply:
        try:
            body = orjson.loads(content)
        except orjson.JSONDecodeError:
            return cls()
        if not isinstance(body, dict):
            return cls()
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
        choices = body["choices"] if isinstance(body.get("choices"), list) else []
        reasons = tuple(str(c["finish_reason"]) for c in choices if isinstance(c, dict) and c.get("finish_reason"))
        model = body.get("model") if isinstance(body.get("model"), str) else None
        return cls(usage, reasons, model, None, choices)

    @classmethod
    def from_stream(cls, stats: StreamStats) -> Reply:
        return cls(stats.usage, (), None, stats.first_chunk_at)

    def tokens(self, kind: str) -> int | None:
        value = (self.usage or {}).get(kind)
        return value if isinstance(value, int) else None


@dataclass(frozen=True, slots=True)
class Recorder:
    """Where one request's spans and numbers go; one per gateway, built by ``Telemetry``."""

    tracer: trace.Tracer
    propagator: TextMapPropagator  # writes the backend call's ``traceparent``
    instruments: Instruments
    stats: WindowStats  # the dashboard's recent window
    accuracy: RankAccuracy  # the predictor's rank accuracy
    address: Callable[[BackendConfig], tuple[str, int]]  # server.address and server.port
    policy: str  # the queue policy's name, a span attribute
    capture_content: bool = False  # record prompts and completions in spans
    request_log: RequestLog | None = None  # one JSON line per request (opt-in)
    tracing: bool = True  # False: spans go nowhere, so none is made (numbers as ever)


@dataclass(slots=True)
class BackendCall:
    span: trace.Span
    backend: str
    headers: dict[str, str] = field(default_factory=dict)  # traceparent for the upstream request


class RequestTrace:
    def __init__(self, recorder: Recorder, operation: str, route: str, parent: Context | None) -> None:
        self._t = recorder
        self.started = time.monotonic()
        self.operation = operation
        self.span: trace.Span = trace.INVALID_SPAN  # when tracing is off: records nothing
        self._ctx: Context | None = parent  # when tracing is off: the client's, passed on as it came
        if recorder.tracing:
            self.span = recorder.tracer.start_span(
                f"POST {route}", context=parent, kind=SpanKind.SERVER,
                attributes={sc.HTTP_METHOD: "POST", sc.HTTP_ROUTE: route, sc.OPERATION: operation},
            )
            self._ctx = trace.set_span_in_context(self.span, parent)
        self._queue: trace.Span | None = None
        self.model = self.backend = ""  # metric labels, known as the request goes
        self.cls: str | None = None
        self.queue_s: float | None = None
        self._outcome: Outcome | None = None
        self._req: InferenceRequest | None = None
        self._predicted: tuple[float, PredictionSource] | None = None
        self._tier = ""
        self._ttft_s: float | None = None
        self._tpot_s: float | None = None
        self._tokens: int | None = None
        self.pauses = 0
        self._ended = False
        self.tenant = self.key_id = ""  # who sent it, once authenticated (the request log)
        self.request_id = ""
        self._input_tokens: int | None = None

    def principal(self, request_id: str, tenant: str, key_id: str) -> None:
        """Who sent the request (the request log's tenant and key id)."""
        self.request_id, self.tenant, self.key_id = request_id, tenant, key_id

    def client_request_id(self, value: str | None) -> None:
        """The client's own x-request-id, when it sent a valid one."""
        if value is not None and self.span.is_recording():
            self.span.set_attribute(sc.CLIENT_REQUEST_ID, value)

    # -- the scheduler's part ------------------------------------------------------------
    def enqueued(self, req: InferenceRequest, placement: Placement, spec: Ticket, pool: str) -> None:
        self._req, self.cls = req, spec.cls
        self._predicted = (placement.prediction.tokens, placement.prediction.source)
        self.model = req.model
        self._tier = spec.tier
        if self.span.is_recording():
            self.span.set_attributes({
                sc.REQUEST_MODEL: req.model, sc.REQUEST_STREAM: req.stream, sc.CLASS: spec.cls,
                sc.PREDICTED: spec.predicted, sc.PREDICTION_SOURCE: placement.prediction.source.value,
                sc.POLICY: self._t.policy, sc.TENANT: spec.tenant, sc.TIER: spec.tier, sc.POOL: pool,
                sc.REQUEST_ID: spec.id,
            })
            if req.max_tokens is not None:
                self.span.set_attribute(sc.REQUEST_MAX_TOKENS, req.max_tokens)
            self.span.add_event(sc.EV_ENQUEUED)
        if self._t.tracing:
            self._queue = self._t.tracer.start_span("triage.queue", context=self._ctx, kind=SpanKind.INTERNAL)

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """Label values of the GenAI metrics (``metrics.GENAI_LABELS``)."""
        return (self.operation, sc.PROVIDER, self.model, self.cls or "", self.backend)

    def _decide(self, outcome: Outcome) -> None:
        if self._outcome is None:
            self._outcome = outcome
            self._t.instruments.admission.add(1, (outcome, self.cls or ""))

    def refused(self, outcome: Outcome) -> None:
        """The scheduler refused or evicted the request (``SchedulerError.outcome``)."""
        self._decide(outcome)
        self._t.stats.rejected(self.cls or "none")
        if self._queue is not None:
            self._queue.set_status(Status(StatusCode.ERROR, outcome))
            self._queue.set_attribute(sc.OUTCOME, outcome)
            self._queue.end()
            self._queue = None

    def dispatched(self, grant: Grant) -> None:
        self.backend = grant.backend
        if self._outcome is None:
            self._decide(Outcome.ADMITTED)
            self.queue_s = grant.queued_s
            self._t.instruments.queue_wait.record(grant.queued_s, (grant.pool, self.cls or "", self._tier))
        if self._queue is not None:
            self._queue.set_attribute(sc.BACKEND, grant.backend)
            self._queue.end()
            self._queue = None
        if self.span.is_recording():
            self.span.set_attributes({sc.BACKEND: grant.backend, sc.QUEUE_MS: round(grant.queued_s * 1000, 3)})
            self.span.add_event(sc.EV_DISPATCHED, {sc.BACKEND: grant.backend})

    def paused(self, backend: str, tokens: int, reason: str = "") -> None:
        """Its generation was paused for more urgent work after ``tokens`` output tokens;
        ``reason``: what the scheduler expected the pause to gain and cost."""
        self.pauses += 1
        self._t.instruments.pauses.add(1, (backend, self.cls or ""))
        if self.span.is_recording():
            self.span.add_event(sc.EV_PAUSED, {sc.BACKEND: backend, sc.OUTPUT_TOKENS: tokens, sc.PAUSE_REASON: reason})
            self.span.set_attribute(sc.PAUSES, self.pauses)

    def resumed(self, backend: str, from_ids: bool = False) -> None:
        """It runs again, on ``backend``, from the token ids so far or from the text."""
        how = "token_ids" if from_ids else "text"
        self._t.instruments.resumes.add(1, (backend, how))
        if self.span.is_recording():
            self.span.add_event(sc.EV_RESUMED, {sc.BACKEND: backend, sc.RESUME_FROM: how})

    def reread(self, backend: str, prompt_tokens: int) -> None:
        """A continuation made ``backend`` re-read ``prompt_tokens`` (prompt plus text so far)."""
        self._t.instruments.resume_prefill.add(prompt_tokens, (backend,))

    def overloaded(self, backend: str, status: int, cool_s: float) -> None:
        """``backend`` refused it as overloaded (it cools down ``cool_s``): queued again."""
        if self.span.is_recording():
            self.span.add_event(sc.EV_OVERLOADED, {sc.BACKEND: backend, sc.HTTP_STATUS: status, sc.COOLDOWN_S: cool_s})

    # -- the backend's part --------------------------------------------------------------
    def call(self, backend: BackendConfig, req: InferenceRequest) -> BackendCall:
        if not self._t.tracing:  # no span; the client's own trace context, if it sent one, goes on
            call = BackendCall(trace.INVALID_SPAN, backend.name)
            if self._ctx is not None:
                self._t.propagator.inject(call.headers, context=self._ctx)
            return call
        host, port = self._t.address(backend)
        span = self._t.tracer.start_span(
            f"{self.operation} {req.model}", context=self._ctx, kind=SpanKind.CLIENT,
            attributes={
                sc.OPERATION: self.operation, sc.PROVIDER_NAME: sc.PROVIDER, sc.REQUEST_MODEL: req.model,
                sc.SERVER_ADDRESS: host, sc.SERVER_PORT: port, sc.BACKEND: backend.name,
            },
        )
        if self._t.capture_content and span.is_recording():
            content = req.body.get("messages") if "messages" in req.body else req.body.get("prompt")
            span.set_attribute(sc.INPUT_MESSAGES, orjson.dumps(content).decode())
        call = BackendCall(span, backend.name)
        self._t.propagator.inject(call.headers, context=trace.set_span_in_context(span))
        return call

    def call_done(
        self, call: BackendCall | None, tokens: int | None, ok: bool, status: int, tpot_s: float | None,
        reply: Reply | None,
    ) -> None:
        """One backend attempt ended; ``tokens`` is set only for a complete, successful answer."""
        if call is None:
            return
        span, ins = call.span, self._t.instruments
        reply = reply or Reply()
        if reply.first_token_at is not None:
            self._ttft_s = reply.first_token_at - self.started
            self.span.add_event(sc.EV_FIRST_TOKEN, timestamp=wall_ns(reply.first_token_at))
        if span.is_recording():
            span.set_attribute(sc.HTTP_STATUS, status)
            for attr, kind in ((sc.INPUT_TOKENS, "prompt_tokens"), (sc.OUTPUT_TOKENS, "completion_tokens")):
                if (n := reply.tokens(kind)) is not None:
                    span.set_attribute(attr, n)
            if reply.finish_reasons:
                span.set_attribute(sc.FINISH_REASONS, reply.finish_reasons)
            if reply.response_model:
                span.set_attribute(sc.RESPONSE_MODEL, reply.response_model)
            if self._t.capture_content and reply.output is not None:
                span.set_attribute(sc.OUTPUT_MESSAGES, orjson.dumps(reply.output).decode())
        if not ok or status >= 400:
            span.set_status(Status(StatusCode.ERROR, f"backend answered {status}" if ok else "backend failed"))
            span.set_attribute(sc.ERROR_TYPE, str(status) if ok else "upstream_error")
        span.end()
        if tokens is None or not ok:
            return
        self._tokens = tokens
        self._input_tokens = reply.tokens("prompt_tokens")
        key = self.key
        ins.output_tokens.add(tokens, key)
        ins.token_usage.record(tokens, (*key, "output"))
        if (prompt := reply.tokens("prompt_tokens")) is not None:
            ins.token_usage.record(prompt, (*key, "input"))
        if self._ttft_s is not None:
            ins.ttft.record(self._ttft_s, key)
            if tpot_s is not None:
                self._tpot_s = tpot_s
                ins.tpot.record(tpot_s, key)
        self._learned(tokens)

    def _learned(self, tokens: int) -> None:
        if self._predicted is None or self._req is None:
            return
        predicted, source = self._predicted
        cut = self._req.max_tokens is not None and tokens >= self._req.max_tokens
        if cut or source in (PredictionSource.CAP, PredictionSource.ORACLE):
            return
        self._t.instruments.predictor_error.record(ratio(tokens, predicted), (self._req.model, source.value))
        self._t.accuracy.observe(predicted, tokens)

    # -- the end -----------------------------------------------------------------------
    def end(self, status: int, error: str | None = None) -> None:
        """The response is over (its last byte sent, or an error answered). Once."""
        if self._ended:
            return
        self._ended = True
        if self._queue is not None:  # still queued: the client left
            self._decide(Outcome.CANCELLED)
            self._queue.set_attribute(sc.OUTCOME, Outcome.CANCELLED)
            self._queue.end()
        if self._outcome not in (None, Outcome.ADMITTED, Outcome.CANCELLED):
            result = Outcome.REJECTED
        elif status == 499 or error == Outcome.CLIENT_GONE:
            result = Outcome.CLIENT_GONE
        elif error is not None or status >= 400:
            result = Outcome.ERROR
        else:
            result = Outcome.OK
        duration = time.monotonic() - self.started
        error_type = "" if result is Outcome.OK else (error or str(status))
        ins, key = self._t.instruments, self.key
        ins.duration.record(duration, (*key, error_type))
        ins.requests.add(1, (*key, result))
        if self.cls is not None and result in (Outcome.OK, Outcome.ERROR):
            self._t.stats.completed(
                self.cls, result is Outcome.OK, self._tokens, self._ttft_s, self._tpot_s, self.queue_s, self.pauses
            )
        if self._t.request_log is not None:
            self._log_line(status, result, error, duration)
        if self.span.is_recording():
            self.span.set_attribute(sc.HTTP_STATUS, status)
            if result is not Outcome.OK:
                self.span.set_attribute(sc.ERROR_TYPE, error_type)
            if result in (Outcome.ERROR, Outcome.REJECTED) or status >= 500:
                self.span.set_status(Status(StatusCode.ERROR, error_type))
        self.span.end()

    def _log_line(self, status: int, result: Outcome, error: str | None, duration: float) -> None:
        assert self._t.request_log is not None
        refused = self._outcome not in (None, Outcome.ADMITTED, Outcome.CANCELLED)
        outcome = str(self._outcome) if refused else (error if result is not Outcome.OK and error else str(result))
        self._t.request_log.write(RequestLine(
            request_id=self.request_id, tenant=self.tenant, key_id=self.key_id, model=self.model,
            cls=self.cls or "", tier=self._tier, backend=self.backend,
            predicted_tokens=int(self._predicted[0]) if self._predicted else None,
            input_tokens=self._input_tokens, output_tokens=self._tokens, queue_wait_s=self.queue_s,
            ttft_s=self._ttft_s, duration_s=duration, pauses=self.pauses, outcome=outcome, status=status,
        ))
