"""The simulator's shared vocabulary: what a parsed request and its prompt are, how it can end, and its errors.

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
class PromptText:
    """An original prompt as the prefix cache cuts it into tokens (``simulator/blocks.py``).

    Token ``t`` stands for the counted characters ``[t * chars_per_token, (t + 1) *
    chars_per_token)``. Chat role marks are not counted (the estimate counts contents
    only) but are part of ``rendered``, so the same words under another role are another
    prompt; ``ends`` maps counted offsets to ``rendered`` offsets, one pair per message.
    """

    rendered: str  # role marks and contents (chat), the prompt (completions), or hex token ids
    tokens: int  # tokens the counted characters make; may be 0
    chars_per_token: int  # 4 for text (the estimate), 8 for rendered token ids
    ends: tuple[tuple[int, int], ...]  # per message: (end in counted characters, end in rendered)


@dataclass(frozen=True, slots=True)
class Prompt:
    """A request's prompt, read as an original prompt plus output already generated.

    A fresh request has ``run == 0``. A continuation (chat with ``continue_final_message``,
    or a completions prompt that ends in the model's own words) has ``run`` words of the
    model's output after the original prompt; see ``simulator/textgen.py``.
    """

    original: str  # the original prompt, roles included: keys the natural length and first word
    table_key: str | None  # matched against the length table; None for token-id prompts
    text: PromptText  # the original prompt's tokens
    run: int  # the model's words after the original prompt; 0 for a fresh request
    run_start: int  # vocabulary index of the run's first word (0 when run == 0)
    ids: tuple[int, ...] | None = None  # a token-id prompt's ids, as sent
    origin: Endpoint | None = None  # where the original prompt came (when not this request's endpoint)

    @property
    def tokens(self) -> int:
        """All prompt tokens, the run included (one per word): at least 1."""
        return max(1, self.text.tokens + self.run)

    @property
    def original_tokens(self) -> int:
        """Tokens of the original prompt, as a fresh request with it would count them."""
        return max(1, self.text.tokens)


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """The parts of an OpenAI request the simulator uses, validated."""

    endpoint: Endpoint
    model: str
    stream: bool
    include_usage: bool  # stream_options.include_usage
    prompt: Prompt
    max_tokens: int | None  # max_tokens / max_completion_tokens, if given
    min_tokens: int  # vLLM extension; 0 when absent
    ignore_eos: bool  # vLLM extension: generate exactly up to the cap
    n: int = 1  # choices: n sequences of the same plan (non-streamed only)
    token_ids: bool = False  # vLLM's return_token_ids: the prompt's ids and each token's
    running_usage: bool = False  # stream_options.continuous_usage_stats: usage on every chunk
    n_probs: int = 0  # llama.cpp's: each token's logprobs (its id among them), that many candidates
    post_sampling_probs: bool = False  # llama.cpp's: probabilities after sampling (prob, top_probs)
    timings_per_token: bool = False  # llama.cpp's: timings on every chunk

    @property
    def prompt_tokens(self) -> int:
        return self.prompt.tokens


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
