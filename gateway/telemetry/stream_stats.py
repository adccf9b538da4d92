"""What the relay saw of one upstream stream: when it started, its first content, its
end, its usage and how it ended. Written by the relay, read when the stream ends (the
span, the scheduler's report)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class StreamStats:
    """What the relay saw; read by ``on_done``."""

    started: float = field(default_factory=time.monotonic)  # the upstream call was sent
    first_chunk_at: float | None = None  # first event that carries generated text
    ended_at: float | None = None  # last byte relayed
    events: int = 0  # data events relayed, [DONE] excluded
    usage: dict[str, int] | None = None
    error: str | None = None  # set when the stream broke mid-way
    client_gone: bool = False
    completed: bool = False  # reached the end of the upstream stream

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_chunk_at is None else self.first_chunk_at - self.started

    def tpot_s(self, tokens: int | None) -> float | None:
        if self.first_chunk_at is None or self.ended_at is None or not tokens or tokens < 2:
            return None
        return (self.ended_at - self.first_chunk_at) / (tokens - 1)
