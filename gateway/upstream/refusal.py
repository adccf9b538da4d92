"""A backend's refusal, read: how long it asks us to stay away, and the error a client may see.

``retry_after_s`` reads ``Retry-After`` in both forms HTTP allows (RFC 9110 §10.2.3):
delay-seconds or an HTTP-date. ``Cooldown`` turns it into how long a backend that
answered 429/503 gets no grants: the header's delay when it sent one, a short default
when it did not, never longer than a bound (a backend cannot park itself for an hour).

``client_error`` rewrites a backend's error body in OpenAI's shape
(``{"error": {message, type, param, code}}``), keeping its status and its message and
nothing else: a traceback, a stack frame or a body that is not an error the server
meant to show (an HTML page, a proxy's text) becomes a message that names only the
status, and the message is bounded in size.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import orjson

from gateway.errors import error_body

OVERLOADED = (429, 503)  # the backend is busy, not broken
MAX_MESSAGE_CHARS = 1024

_INTERNALS = re.compile(r"Traceback \(most recent call last\)|^\s*File \"|\bat [\w.$]+\(|<html|<!doctype", re.I | re.M)
_WORD = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 408: "timeout_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error"}


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds the header asks for (0 for a date in the past); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value[:9])  # more digits than a year of seconds is the bound's business
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None  # an HTTP-date is always GMT; a date without a zone is not one
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True, slots=True)
class Cooldown:
    default_s: float = 1.0  # when the backend says nothing
    max_s: float = 30.0
    min_s: float = 0.05  # even `Retry-After: 0` spaces the attempts a little

    def seconds(self, retry_after: str | None) -> float:
        """How long a backend that refused as overloaded gets no grants."""
        asked = retry_after_s(retry_after)
        wanted = self.default_s if asked is None else asked
        return max(self.min_s, min(self.max_s, wanted))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _fields(body: bytes) -> tuple[str | None, str | None, str | None, str | None]:
    """message, type, code, param from the error shapes servers use: OpenAI's and vLLM's
    ``{"error": {...}}`` or ``{"object": "error", "message": ...}``, TGI's
    ``{"error": "...", "error_type": ...}``, FastAPI's ``{"detail": ...}``; else plain text."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        return (text or None), None, None, None
    if not isinstance(data, dict):
        return None, None, None, None
    err = data.get("error")
    if isinstance(err, dict):
        code = err.get("code")
        return (_text(err.get("message")), _text(err.get("type")),
                str(code) if isinstance(code, (str, int)) else None, _text(err.get("param")))
    if _text(err):
        return _text(err), _text(data.get("error_type")), None, None
    detail = data.get("detail")
    if _text(detail):
        return _text(detail), None, None, None
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return _text(detail[0].get("msg")), None, None, None
    code = data.get("code")
    return _text(data.get("message")), _text(data.get("type")), str(code) if isinstance(code, (str, int)) else None, None


def client_error(status: int, body: bytes) -> bytes:
    """The body a client gets for a backend's non-200 answer (its status kept as is)."""
    message, type_, code, param = _fields(body[:65_536])
    if message is None or _INTERNALS.search(message):
        message = f"The inference backend answered {status}."
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    if type_ is None or not _WORD.match(type_):
        type_ = _TYPES.get(status, "upstream_error" if status >= 500 else "invalid_request_error")
    code = code if code is not None and _WORD.match(code) else None
    param = param if param is not None and _WORD.match(param) else None
    return error_body(message, type_, code, param)
