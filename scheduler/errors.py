"""The scheduler's errors, one hierarchy. The gateway maps each to an HTTP answer.

    SchedulerError
     ├── Rejected            refused before it was queued (nothing to undo)
     │    ├── QueueFull      the pool's or the tenant's queue is at its bound -> 429
     │    ├── NoBackend      no backend serves the model -> 404
     │    └── Unserviceable  every backend of the model is down, or cooling past the
     │                       request's deadline -> 503 no_backend, with Retry-After
     ├── Evicted             taken out of the queue after it was admitted
     │    ├── DeadlineExceeded  waited longer than its deadline -> 504
     │    └── Shed           pushed out for more urgent work -> 429
     └── SchedulerUnavailable   Redis cannot be reached -> 503

``outcome`` is a low-cardinality label for metrics (``types.Outcome``).
"""

from __future__ import annotations

from scheduler.types import Outcome


class SchedulerError(Exception):
    outcome: Outcome = Outcome.ERROR


class Rejected(SchedulerError):
    outcome: Outcome = Outcome.REJECTED


class QueueFull(Rejected):
    outcome: Outcome = Outcome.QUEUE_FULL

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class NoBackend(Rejected):
    outcome: Outcome = Outcome.NO_BACKEND


class Unserviceable(Rejected):
    outcome: Outcome = Outcome.NO_BACKEND

    def __init__(self, message: str, retry_after_s: float) -> None:
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


class SchedulerUnavailable(SchedulerError):
    outcome: Outcome = Outcome.UNAVAILABLE
