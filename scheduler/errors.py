"""The scheduler's errors, one hierarchy. The gateway maps each to an HTTP answer.

    SchedulerError
     ├── Rejected            refused before it was queued (nothing to undo)
     │    ├── QueueFull      the pool's or the tenant's queue is at its bound -> 429
     │    ├── QuotaExceeded  a tenant's or key's rate, token or concurrency limit -> 429
     │    └── NoBackend      no backend serves the model -> 404
     │         └── BackendsDown  every backend of the model is down -> 503
     ├── Draining            this replica shuts down: its queued tickets are handed back -> 503
     ├── Evicted             taken out of the queue after it was admitted
     │    ├── DeadlineExceeded  waited longer than its deadline -> 504
     │    └── Shed           pushed out for more urgent work -> 429
     ├── BackendOverloaded   backends refused it as overloaded until it could wait no longer -> 429/503
     └── SchedulerUnavailable   Redis cannot be reached -> 503

``outcome`` is a low-cardinality label for metrics (``types.Outcome``).
"""

from __future__ import annotations

from scheduler.types import Outcome, RateLimits


class SchedulerError(Exception):
    outcome: Outcome = Outcome.ERROR


class Rejected(SchedulerError):
    outcome: Outcome = Outcome.REJECTED


class QueueFull(Rejected):
    outcome: Outcome = Outcome.QUEUE_FULL

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QuotaExceeded(Rejected):
    outcome: Outcome = Outcome.QUOTA

    def __init__(
        self, message: str, retry_after_s: float | None, limits: RateLimits | None = None, limit: str = "",
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s  # None: no wait helps (the request exceeds the limit itself)
        self.limits = limits  # the x-ratelimit-* numbers
        self.limit = limit  # requests | tokens | concurrent


class NoBackend(Rejected):
    outcome: Outcome = Outcome.NO_BACKEND


class BackendsDown(NoBackend):
    outcome: Outcome = Outcome.BACKENDS_DOWN

    def __init__(self, message: str, retry_after_s: float = 5.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Draining(SchedulerError):
    """The replica holding the request shuts down; another replica can take it at once."""

    outcome: Outcome = Outcome.DRAINING

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Evicted(SchedulerError):
    outcome: Outcome = Outcome.EVICTED


class DeadlineExceeded(Evicted):
    outcome: Outcome = Outcome.DEADLINE


class Shed(Evicted):
    outcome: Outcome = Outcome.SHED

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BackendOverloaded(SchedulerError):
    """Backends answered it 429/503 (busy, not broken) and it can wait no longer: past its
    deadline, past the attempts allowed, or no backend of its model free before its deadline."""

    def __init__(self, status: int, retry_after_s: float | None) -> None:
        super().__init__(f"backends refused the request as overloaded ({status})")
        self.status = status  # the backends' own: 429 (rate limited) or 503 (overloaded)
        self.retry_after_s = retry_after_s  # when a backend of the model may take work; None: unknown


class SchedulerUnavailable(SchedulerError):
    outcome: Outcome = Outcome.UNAVAILABLE
