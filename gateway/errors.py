"""Gateway errors and their OpenAI-style bodies: ``{"error": {message, type, param, code}}``.

Every failure a client can see is a ``GatewayError`` by the time it reaches a route;
``from_scheduler`` is the one place scheduler errors become HTTP answers.
"""

from __future__ import annotations

import math

import orjson
from starlette.responses import Response

from scheduler import errors as sched
from scheduler.types import RateLimits


class GatewayError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        retry_after_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.retry_after_s = retry_after_s
        self.headers = headers or {}  # extra response headers (x-ratelimit-*)

    def body(self) -> bytes:
        return error_body(self.message, self.type, self.code, self.param)

    def response(self, request_id: str | None = None) -> Response:
        headers = dict(self.headers)
        if request_id:
            headers["x-request-id"] = request_id
        if self.retry_after_s is not None:
            headers["retry-after"] = str(max(1, math.ceil(self.retry_after_s)))
        return Response(self.body(), self.status, headers=headers, media_type="application/json")


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def bad_request(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


def from_scheduler(exc: sched.SchedulerError) -> GatewayError:
    if isinstance(exc, sched.BackendOverloaded):
        return backend_overloaded(exc.status, exc.retry_after_s)
    if isinstance(exc, sched.QueueFull):
        return GatewayError(429, str(exc), "rate_limit_error", "queue_full", retry_after_s=exc.retry_after_s)
    if isinstance(exc, sched.QuotaExceeded):
        code = "request_too_large" if exc.retry_after_s is None else "rate_limit_exceeded"
        return GatewayError(
            429, str(exc), "rate_limit_error", code, retry_after_s=exc.retry_after_s,
            headers=ratelimit_headers(exc.limits) if exc.limits is not None else None,
        )
    if isinstance(exc, sched.Shed):
        return GatewayError(429, str(exc), "rate_limit_error", "shed", retry_after_s=exc.retry_after_s)
    if isinstance(exc, sched.DeadlineExceeded):
        return GatewayError(504, str(exc), "timeout_error", "queue_timeout")
    if isinstance(exc, sched.BackendsDown):
        return GatewayError(503, str(exc), "service_unavailable", "no_backend", retry_after_s=exc.retry_after_s)
    if isinstance(exc, sched.Draining):
        return draining(str(exc), exc.retry_after_s)
    if isinstance(exc, sched.NoBackend):
        return GatewayError(404, str(exc), code="model_not_found", param="model")
    return GatewayError(503, str(exc), "service_unavailable", "scheduler_unavailable", retry_after_s=2)


def draining(message: str = "This gateway replica is shutting down; retry the request (another replica "
             "will take it).", retry_after_s: float = 1.0) -> GatewayError:
    return GatewayError(503, message, "service_unavailable", "draining", retry_after_s=retry_after_s)


def upstream_failed(detail: str) -> GatewayError:
    return GatewayError(502, f"the inference backend failed: {detail}", "upstream_error", "bad_gateway")


def backend_overloaded(status: int, retry_after_s: float | None) -> GatewayError:
    """Our own answer once a request that backends refused as overloaded can wait no
    longer (its deadline, or no backend free before it): their status (429 or 503)."""
    if status == 429:
        return GatewayError(
            429, "The model's backends are rate limited; the request could not be served before its deadline.",
            "rate_limit_error", "backend_overloaded", retry_after_s=retry_after_s or 1.0,
        )
    return GatewayError(
        503, "The model's backends are overloaded; the request could not be served before its deadline.",
        "service_unavailable", "backend_overloaded", retry_after_s=retry_after_s or 1.0,
    )


def ratelimit_headers(limits: RateLimits) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers for the tighter scope's numbers, per kind."""
    out: dict[str, str] = {}
    for kind, value in (("requests", limits.requests), ("tokens", limits.tokens)):
        if value is not None:
            limit, remaining, reset = value
            out[f"x-ratelimit-limit-{kind}"] = str(limit)
            out[f"x-ratelimit-remaining-{kind}"] = str(remaining)
            out[f"x-ratelimit-reset-{kind}"] = _duration(reset)
    return out


def _duration(seconds: float) -> str:
    """As OpenAI writes resets: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    return f"{int(seconds // 60)}m{int(seconds % 60)}s"
