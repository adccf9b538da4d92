"""When does a request that backends keep refusing as overloaded stop waiting?

A backend's 429/503 before the first byte is backpressure: the backend cools down, and
the request is queued again at the front of its tier with its original arrival and
what is left of its deadline (``order.requeue_order``). It gives up (the client gets
our own 429/503) in two places, checked in this order:

1. at once, on the refusal: its deadline has already passed, or this refusal is one
   more than ``max_attempts`` (the bound for a request without a deadline)
   — :func:`out_of_attempts`;
2. once the refusing backend's cool-down is published: no backend of the model can
   take it before its deadline — none is healthy, or the first one is ready only at or
   after the deadline — :func:`cannot_wait`.

:func:`give_up` is both at once, for a caller that knows ``ready_in`` up front.
"""

from __future__ import annotations


def deadline_left(timeout_s: float, age_s: float) -> float | None:
    """How much of a request's deadline is left, ``age_s`` after its arrival? None: it
    has no deadline (``timeout_s`` 0 or less); otherwise possibly 0 or below (passed)."""
    return timeout_s - age_s if timeout_s > 0 else None


def out_of_attempts(left_s: float | None, attempts: int, max_attempts: int) -> bool:
    """Must a request that a backend just refused as overloaded stop at once? Yes when
    its deadline has passed (``left_s`` <= 0; None: no deadline) or ``attempts`` (the
    refusals so far, this one included) exceeds ``max_attempts``."""
    return (left_s is not None and left_s <= 0) or attempts > max_attempts


def cannot_wait(left_s: float | None, ready_in: float | None) -> bool:
    """Is it no use queueing a refused request again? Yes when no backend of its model is
    healthy (``ready_in`` None) or the first one is ready (``ready_in`` seconds from now)
    only at or after its deadline (``left_s`` from now; None: no deadline, any wait will do)."""
    return ready_in is None or (left_s is not None and ready_in >= left_s)


def give_up(left_s: float | None, attempts: int, max_attempts: int, ready_in: float | None) -> bool:
    """Does a request that a backend refused as overloaded end with our own 429/503,
    rather than queue again? When it is out of attempts or cannot wait (both above)."""
    return out_of_attempts(left_s, attempts, max_attempts) or cannot_wait(left_s, ready_in)
