"""One request's life inside the engine: its token counts, its KV holding, and its wake-up."""

from __future__ import annotations

import asyncio

from simulator.blocks import BlockHashes
from simulator.protocol import FinishReason


class Sequence:
    """A request being served. Owned by the scheduler; read by the HTTP handler.

    The handler waits on ``wait()``. The engine calls ``notify()`` after every step that
    produced a token for a streamed sequence, and once when any sequence finishes, so a
    non-streamed request costs one wake-up in total.
    """

    __slots__ = (
        "prompt_tokens",
        "target_tokens",
        "planned_reason",
        "drop_after",
        "streamed",
        "arrival",
        "computed",
        "kv_held",
        "blocks",
        "block_refs",
        "blocks_seen",
        "generated",
        "first_token_at",
        "scheduled_at",
        "prefill_computed",
        "last_token_at",
        "finished_at",
        "finish_reason",
        "dropped",
        "_event",
    )

    def __init__(
        self,
        prompt_tokens: int,
        target_tokens: int,
        planned_reason: FinishReason,
        *,
        streamed: bool,
        arrival: float,
        drop_after: int | None = None,
        blocks: BlockHashes | None = None,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.target_tokens = target_tokens  # output length decided at admission; 0: EOS right away
        self.planned_reason = planned_reason  # finish reason once target_tokens are out
        self.drop_after = drop_after  # injected fault: end as aborted after this many tokens
        self.streamed = streamed
        self.arrival = arrival
        self.computed = 0  # tokens whose KV has been computed (prompt, then fed-back outputs)
        self.kv_held = 0  # KV-cache slots this sequence holds alone (not in a shared block)
        self.blocks = blocks  # its tokens' block hashes, for the prefix cache; None: never cached
        self.block_refs: list[int] = []  # shared (cached) blocks it holds, in token order
        self.blocks_seen = 0  # leading full blocks already looked up or registered
        self.generated = 0  # output tokens produced so far
        self.first_token_at: float | None = None
        self.scheduled_at: float | None = None  # when its first step began (vLLM's prefill time counts from it)
        self.prefill_computed = 0  # prompt tokens computed before its first token (cache hits not)
        self.last_token_at: float | None = None
        self.finished_at: float | None = None
        self.finish_reason: FinishReason | None = None
        self.dropped = False  # ended by the drop_after fault, not by the client
        self._event = asyncio.Event()

    @property
    def to_compute(self) -> int:
        """Tokens to run through the model before the next output token can be sampled.

        The whole prompt at first (less a prefix found in the prefix cache); 1 while decoding
        (the last output fed back); after a preemption, prompt plus everything generated,
        as vLLM recomputes them (again less what is still cached).
        """
        return self.prompt_tokens + self.generated - self.computed

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def finish(self, reason: FinishReason, now: float) -> None:
        self.finish_reason = reason
        self.finished_at = now
        self._event.set()

    def notify(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        """Until the engine has news (tokens, or the end) since the last call."""
        await self._event.wait()
        self._event.clear()
