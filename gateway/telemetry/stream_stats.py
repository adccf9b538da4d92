"""What the relay saw of one upstream stream: when it started, its first content, its
end, its usage and how it ended. Written by the relay, read when the stream ends (the
span, the scheduler's report).

A stream that was paused and resumed is several upstream calls, *parts*, relayed as one
response. The client's view (its first token, its time per token, pauses included) and
the backend's view of the last part (its own first token and time per token, which the
adaptive limit learns from) are kept apart: a resumed part measured from the request's
first token would give a negative TTFT and a TPOT that counts the pause.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class StreamStats:
    """What the relay saw; read by ``on_done``."""

    part_started: float = field(default_factory=time.monotonic)  # the current part's call was sent
    first_chunk_at: float | None = None  # the response's first event that carries generated text
    part_first_at: float | None = None  # the current part's first such event
    part_carried: int = 0  # output tokens sent before the current part began
    ended_at: float | None = None  # last byte relayed
    events: int = 0  # data events relayed, [DONE] excluded
    usage: dict[str, int] | None = None
    error: str | None = None  # set when the stream broke mid-way
    client_gone: bool = False
    completed: bool = False  # reached the end of the upstream stream

    def new_part(self, carried: int) -> None:
        """A paused stream resumes: what follows is a new call of the backend's."""
        self.part_first_at, self.part_carried = None, carried
        self.error, self.completed = None, False

    @property
    def ttft_s(self) -> float | None:
        """The current part's time to its first token, from its own call."""
        return None if self.part_first_at is None else self.part_first_at - self.part_started

    def tpot_s(self, tokens: int | None) -> float | None:
        """The current part's time per output token (``tokens``: the whole response's)."""
        if tokens is None:
            return None
        return _per_token(self.part_first_at, self.ended_at, tokens - self.part_carried)

    def client_tpot_s(self, tokens: int | None) -> float | None:
        """The client's time per output token, over the whole response (pauses included)."""
        return _per_token(self.first_chunk_at, self.ended_at, tokens)


def _per_token(first: float | None, last: float | None, tokens: int | None) -> float | None:
    if first is None or last is None or not tokens or tokens < 2:
        return None
    return (last - first) / (tokens - 1)
