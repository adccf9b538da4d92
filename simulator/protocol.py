"""The simulator's shared vocabulary: what a parsed request is, how it can end, and its errors.

Nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Endpoint(enum.StrEnum):
    """Which OpenAI API a request came through; decides the response shapes."""

    CHAT = "chat"  # /v1/chat/completions
    COMPLETIONS = "completions"  # /v1/completions


class FinishReason(enum.StrEnum):
    """Why a sequence ended. The first two are OpenAI's; ``abort`` is vLLM's metric label."""

    STOP = "stop"  # the natural length was reached ("EOS")
    LENGTH = "length"  # max_tokens or the context window cut it
    ABORT = "abort"  # the client went away, a fault dropped it, or the server shut down


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """The parts of an OpenAI request the simulator uses, validated."""

    endpoint: Endpoint
    model: str
    stream: bool
    include_usage: bool  # stream_options.include_usage
    prompt_text: str  # what the output length is keyed on
    prompt_tokens: int
    max_tokens: int | None  # max_tokens / max_completion_tokens, if given
    min_tokens: int  # vLLM extension; 0 when absent
    ignore_eos: bool  # vLLM extension: generate exactly up to the cap


class ApiError(Exception):
    """An error answered to the client in OpenAI's shape.

    ``{"error": {"message", "type", "param", "code"}}`` with ``status`` as HTTP status.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
