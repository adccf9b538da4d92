"""Every metric the gateway exports, each defined once, here.

The same instruments feed both exports: Prometheus text at ``/metrics``
(``prometheus.py``; names there become ``gen_ai_server_time_to_first_token_seconds``,
``triage_requests_total``, ...) and OTLP when configured (``otlp.py``).
Labels are kept low-cardinality: model, class, tier, pool, backend and an
``outcome`` from a fixed set — never a tenant or a request id. Label values are
passed as tuples in the order of the ``*_LABELS`` constants below.

Gauges about backends and queues are *observed*: they read what the registry and
``QueueDepth`` already hold when an export collects, so the request path pays
nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterator

from gateway.telemetry import semconv as sc
from gateway.telemetry.accuracy import RankAccuracy
from gateway.telemetry.instruments import Key, Registry
from scheduler.backends.breaker import Health
from scheduler.backends.registry import BackendRegistry
from scheduler.queue.depth import QueueDepth

# label keys; the GenAI metrics carry the conventions' attributes and Triage's class and backend
GENAI_LABELS = (sc.OPERATION, sc.PROVIDER_NAME, sc.REQUEST_MODEL, sc.CLASS, sc.BACKEND)
QUEUE_LABELS = (sc.POOL, sc.CLASS, sc.TIER)
BACKEND_LABELS = (sc.BACKEND, sc.POOL)

QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# actual / predicted at powers of two, symmetric around 1 (exact): bound 2^k of the ratio is
# bound k of log2(actual / predicted), so this is the log-ratio histogram (OpenTelemetry
# histograms take no negative values, hence the ratio itself is recorded)
RATIO_BUCKETS = tuple(round(2.0**k, 4) for k in (-4, -3, -2, -1.5, -1, -0.5, -0.25, 0.25, 0.5, 1, 1.5, 2, 3, 4))


class Instruments:
    def __init__(self, registry: BackendRegistry, depth: QueueDepth, accuracy: RankAccuracy) -> None:
        self.registry = Registry()
        self._backends = registry
        self._depth = depth
        self._accuracy = accuracy
        r = self.registry

        # -- GenAI conventions ---------------------------------------------------------
        self.ttft = r.histogram(
            sc.TTFT, "s", "Arrival at the gateway to the first generated token (queue wait included), "
            "streamed responses that succeeded.", GENAI_LABELS, sc.TTFT_BUCKETS,
        )
        self.tpot = r.histogram(
            sc.TPOT, "s", "Time per output token after the first, streamed responses that succeeded.",
            GENAI_LABELS, sc.TPOT_BUCKETS,
        )
        self.duration = r.histogram(
            sc.REQUEST_DURATION, "s", "Arrival at the gateway to the last byte of the response, every request.",
            (*GENAI_LABELS, sc.ERROR_TYPE), sc.DURATION_BUCKETS,
        )
        self.token_usage = r.histogram(
            sc.TOKEN_USAGE, "{token}", "Input and output tokens per successful request, from the backend's usage.",
            (*GENAI_LABELS, sc.TOKEN_TYPE), sc.TOKEN_BUCKETS,
        )

        # -- Triage: requests ----------------------------------------------------------
        self.requests = r.counter(
            "triage.requests", "{request}", "Requests answered, by outcome: ok, error, rejected, client_gone.",
            (*GENAI_LABELS, sc.OUTCOME),
        )
        self.output_tokens = r.counter(
            "triage.output_tokens", "{token}", "Output tokens of successful requests.", GENAI_LABELS
        )
        self.admission = r.counter(
            "triage.scheduler.outcomes", "{request}",
            "What the scheduler did with each request: admitted, refused (queue_full, no_backend, "
            "unavailable), evicted (deadline, shed), or cancelled by the client while queued.",
            (sc.OUTCOME, sc.CLASS),
        )
        self.pauses = r.counter(
            "triage.pauses", "{pause}", "Running generations paused for more urgent work (and resumed later).",
            (sc.BACKEND, sc.CLASS),
        )
        self.resumes = r.counter(
            "triage.resumes", "{resume}",
            "Paused generations resumed, by what the continuation carried: the token ids (exact) or the text so far.",
            (sc.BACKEND, sc.RESUME_FROM),
        )
        self.resume_prefill = r.counter(
            "triage.resume.prefill_tokens", "{token}",
            "Prompt tokens the backends read again to resume paused generations (prompt plus text so far).",
            (sc.BACKEND,),
        )
        self.queue_wait = r.histogram(
            "triage.queue.wait", "s", "Enqueue to grant of admitted requests.", QUEUE_LABELS, QUEUE_WAIT_BUCKETS
        )
        self.predictor_error = r.histogram(
            "triage.predictor.error_ratio", "1", "Actual / predicted output tokens of replies that ended on "
            "their own; bounds at powers of two, so it reads as log2(actual / predicted).",
            (sc.REQUEST_MODEL, sc.PREDICTION_SOURCE), RATIO_BUCKETS,
        )

        # -- Triage: observed state ----------------------------------------------------
        r.gauge("triage.queue.depth", "{request}", "Tickets queued, all replicas.", QUEUE_LABELS, self._queue_depth)
        r.gauge(
            "triage.backend.in_flight", "{request}", "Leases held on the backend by all replicas.",
            BACKEND_LABELS, self._backend("in_flight"),
        )
        r.gauge(
            "triage.backend.limit", "{request}", "The backend's concurrency limit now.",
            BACKEND_LABELS, self._backend("limit"),
        )
        r.gauge(
            "triage.backend.long_cap", "{request}", "Slots long and batch work may hold on the backend.",
            BACKEND_LABELS, self._backend("long_cap"),
        )
        r.gauge(
            "triage.backend.borrowed", "{request}", "Reserved slots borrowed by long work now.",
            BACKEND_LABELS, self._backend("borrowed"),
        )
        r.gauge(
            "triage.backend.health", "1", "1 for the backend's current state (up, probing, down), 0 for the others.",
            (sc.BACKEND, sc.STATE), self._health,
        )
        r.gauge(
            "triage.predictor.kendall_tau", "1",
            "Kendall's tau between predicted and actual output tokens, last 200 replies that ended on their own.",
            (), self._tau,
        )

    # -- observed gauges -------------------------------------------------------------------
    def _queue_depth(self) -> Iterator[tuple[Key, float]]:
        seen = set()
        for key, n in self._depth.snapshot.items():
            seen.add(key[0])
            yield key, n
        for pool in sorted({b.config.pool for b in self._backends.backends.values()} - seen):
            yield (pool, "", ""), 0  # an empty queue reads 0, not "no data"

    def _backend(self, field: str):  # noqa: ANN202 - a callback factory
        def observe() -> Iterator[tuple[Key, float]]:
            for b in self._backends.backends.values():
                if field == "limit":
                    value = b.limit
                elif field == "long_cap":
                    value = b.reservation.long_cap(b.limit)
                else:
                    value = getattr(b, field)
                yield (b.name, b.config.pool), value

        return observe

    def _health(self) -> Iterator[tuple[Key, float]]:
        for b in self._backends.backends.values():
            for state in Health:
                yield (b.name, state.value), 1 if b.health is state else 0

    def _tau(self) -> Iterator[tuple[Key, float]]:
        tau = self._accuracy.tau()
        if tau is not None:
            yield (), tau
