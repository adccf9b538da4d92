"""The scheduler's vocabulary: the nouns every other module speaks in.

Nothing here does I/O. A request becomes a ``PredictInput``; the predictor answers a
``Prediction``; the policy turns it into a ``Placement`` (class and ``QueueOrder``);
the gateway queues a ``Ticket``; the dispatch script answers with ``Message``s, one
of which is a ``Grant`` of a backend slot, held as a ``Lease`` until released; each
backend is described to the scripts by a ``BackendRecord``; how each backend call
ended comes back as a ``CallResult``; and every request ends with one ``Outcome``.
How a ``Ticket``, a ``Lease`` or a ``Message`` is written in Redis is in
``queue/records.py`` and nowhere else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

# -- predicting ------------------------------------------------------------------------


class LengthClass(enum.StrEnum):
    """Expected output length bucket, derived from a :class:`Prediction`."""

    SHORT = "short"
    MEDIUM = "medium"
    LONG = "long"


class PredictionSource(enum.StrEnum):
    """Where a prediction came from, most trusted first."""

    HINT = "hint"  # the client said how long (x-triage-expected-tokens)
    ORACLE = "oracle"  # the true length, from a load generator (benchmarks only)
    LEARNED = "learned"  # the online model, trained on observed lengths
    PRIOR = "prior"  # cold start: nothing learned yet
    CAP = "cap"  # max_tokens was below any guess, so the cap is the prediction


@dataclass(frozen=True, slots=True)
class Prediction:
    """Expected output tokens of one request."""

    tokens: float  # point estimate (median-like) of output tokens
    upper: float  # an upper quantile (about p90) of output tokens
    source: PredictionSource


@dataclass(frozen=True, slots=True)
class PredictInput:
    """What the predictor may look at. Built once per request by the gateway."""

    model: str
    tenant: str
    prompt: str  # the user-visible text: last user message (chat) or the prompt (completions)
    system: str = ""  # the system prompt / template, if any ("" for completions)
    prompt_chars: int = 0  # total characters of every message or prompt
    n_messages: int = 1
    max_tokens: int | None = None  # the client's cap, if it sent one
    hint: int | None = None  # x-triage-expected-tokens, if sent
    n: int = 1  # choices asked for: each is generated in full


class Predictor(Protocol):
    """Predicts a request's output length and learns from the lengths it observes."""

    def predict(self, inp: PredictInput) -> Prediction: ...

    def observe(self, inp: PredictInput, actual_tokens: int) -> None: ...


@dataclass(frozen=True, slots=True)
class ClassThresholds:
    """Upper bounds (in predicted output tokens) of the short and medium classes."""

    short_max: int = 256
    medium_max: int = 1024

    def classify(self, tokens: float) -> LengthClass:
        if tokens <= self.short_max:
            return LengthClass.SHORT
        if tokens <= self.medium_max:
            return LengthClass.MEDIUM
        return LengthClass.LONG


# -- ordering --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueOrder:
    """What a queue-order policy decides for one ticket (see ``policy/order.py``)."""

    slack_s: float  # how long later arrivals may overtake it (before the cap)
    tier_offset_s: float  # added after the cap: tiers are a separate, explicit order
    cost_s: float  # predicted service, over the tenant's weight: advances its fair-share clock


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one request goes in the queue: its prediction, class and order."""

    prediction: Prediction
    cls: LengthClass
    order: QueueOrder


# -- queueing --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ticket:
    """A queued request as Redis holds it (never the prompt). Owned by the replica
    holding the client's connection; the dispatch script grants it a backend slot."""

    id: str  # the request id; also the id of the lease it is granted
    model: str
    tenant: str
    cls: str  # its LengthClass value
    predicted: int  # predicted output tokens: the backend's outstanding work grows by this
    timeout_s: float  # queue deadline from enqueue; 0: none
    tier: str
    slack_s: float  # see QueueOrder
    tier_offset_s: float = 0.0
    cost_s: float = 0.0
    avoid: str = ""  # a backend not to use: it just failed this request
    restricted: bool = False  # long or batch work: may hold only its share of a backend
    age_s: float = 0.0  # how long ago the request arrived: a paused request's continuation keeps its arrival
    pauses: int = 0  # how often this request was paused before


@dataclass(frozen=True, slots=True)
class Grant:
    """A backend slot held for one ticket until released."""

    ticket: str  # also the lease id
    pool: str
    backend: str
    queued_s: float  # enqueue -> grant, measured by the owner


@dataclass(frozen=True, slots=True)
class Lease:
    """What Redis records of a granted slot, so that it can be given back exactly."""

    backend: str
    owner: str  # the replica that holds the request
    predicted: int  # the outstanding work it added to its backend
    restricted: bool  # it counts against the backend's long cap
    borrowed: bool  # it holds a slot borrowed from the short-work reserve
    cls: str = ""  # its ticket's class
    score: float = 0.0  # its ticket's queue score: only a more urgent ticket may pause it
    pauses: int = 0  # how often its request was paused before
    tier: str = ""
    arrival: float = 0.0  # its request's arrival on Redis's clock (the starvation bound counts from it)


class MessageKind(enum.StrEnum):
    GRANT = "G"  # a backend slot for the ticket
    EVICT = "E"  # taken out of the queue: its deadline passed, or it was shed
    LOST = "L"  # waited for, but the queue no longer has it: queue it again
    PAUSE = "P"  # a running lease's slot went to a more urgent ticket: pause its request


@dataclass(frozen=True, slots=True)
class Message:
    """What a script tells a replica about one of its tickets."""

    kind: MessageKind
    ticket: str
    detail: str  # the backend for a grant or a pause; the reason for an eviction ("deadline", "shed") or a loss
    borrowed: bool = False  # a grant of a slot reserved for open (short) work


class ResumeMode(enum.StrEnum):
    """How a backend continues a paused generation, named by its engine: the request's text
    so far sent back as a final assistant message with ``continue_final_message`` (vLLM's,
    SGLang's and llama.cpp's field) or after a completions prompt — on vLLM from the token
    ids where it can (``engines.TOKEN_RESUME``) — or not at all (never paused there)."""

    NONE = "none"
    VLLM = "vllm"
    SGLANG = "sglang"
    LLAMACPP = "llamacpp"


@dataclass(frozen=True, slots=True)
class ResumeCost:
    """What resuming a paused generation costs one backend, as its engine shows it (the
    registry reads it from the engine's metrics; the defaults where it shows nothing)."""

    tpot_s: float = 0.05  # one output token of one stream
    prefill_s: float = 0.0025  # one prompt token the engine computes (not found in its cache)
    hit: float = 0.0  # share of a resume's full cache blocks its prefix cache is expected to hold
    block: int = 16  # tokens per cache block
    prefill_base_s: float = 0.0  # what one prefill costs besides its tokens (a scheduling step's overhead)


@dataclass(frozen=True, slots=True)
class BackendRecord:
    """What the pool's Redis keys hold about one backend."""

    name: str
    limit: int  # concurrency limit now
    down: bool = False
    models: tuple[str, ...] = ()
    weight: float = 1.0  # routing weight
    speed: float = 0.0  # measured decode tokens/s; 0: unknown
    long_cap: int | None = None  # slots restricted (long/batch) work may hold; None: all
    borrow: int = 0  # extra slots restricted work may borrow while open work is quiet
    resume: bool = False  # it can resume a paused generation (continue_final_message)
    cost: ResumeCost = ResumeCost()  # what a resume costs it

    def __post_init__(self) -> None:
        if self.long_cap is None:
            object.__setattr__(self, "long_cap", self.limit)


@dataclass(frozen=True, slots=True)
class RateLimits:
    """The numbers of the tighter scope, per kind (None: no such limit); the gateway
    writes them as ``x-ratelimit-*`` headers."""

    requests: tuple[int, int, float] | None  # limit, remaining, reset (s)
    tokens: tuple[int, int, float] | None


# -- ending ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallResult:
    """How one backend call ended, as the scheduler learns from it."""

    ok: bool  # the backend did its part (False: it failed, broke, or answered 5xx)
    status: int = 200  # the backend's HTTP status (200 for any stream that started)
    tokens: int | None = None  # output tokens of a complete answer; None: not learned
    ttft_s: float | None = None
    tpot_s: float | None = None

    @property
    def overloaded(self) -> bool:
        """A busy backend (429/503) is not a broken one."""
        return self.status in (429, 503)

    @classmethod
    def failed(cls) -> CallResult:
        """The backend could not be reached, or broke before a whole answer."""
        return cls(ok=False)

    @classmethod
    def client_gone(cls) -> CallResult:
        """The client left: nothing is learned and the backend is not blamed."""
        return cls(ok=True)


class Outcome(enum.StrEnum):
    """How a request's admission, and then the request, ended: the low-cardinality
    ``outcome`` label of metrics and spans (never a tenant or a request id)."""

    # admission: what the scheduler did with it (triage.scheduler.outcomes)
    ADMITTED = "admitted"
    CANCELLED = "cancelled"  # the client left while it was queued
    ERROR = "error"
    REJECTED = "rejected"
    QUEUE_FULL = "queue_full"
    QUOTA = "quota"  # over a tenant's or a key's limit
    NO_BACKEND = "no_backend"
    EVICTED = "evicted"
    DEADLINE = "deadline"
    SHED = "shed"
    UNAVAILABLE = "unavailable"
    BACKENDS_DOWN = "backends_down"  # every backend of the model is down
    DRAINING = "draining"  # handed back by a replica that shuts down
    # the request's end (triage.requests): ok, error, rejected or client_gone, and
    # the error types a stream or the server itself can end with
    OK = "ok"
    CLIENT_GONE = "client_gone"
    STREAM_BROKEN = "stream_broken"
    INTERNAL = "internal"
