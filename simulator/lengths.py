"""How many tokens a request reads and writes, decided without a tokenizer or a model.

Prompt tokens are estimated as ``ceil(characters / 4)``, at least 1: about right for
English text under the Llama 3 and GPT tokenizers, and cheap. Token-id prompts
(``/v1/completions`` with a list of ints) are counted exactly.

The natural output length (where the model would emit EOS) is a log-normal draw keyed
by a hash of the prompt text and the profile seed, so the same prompt always produces
the same length, in every process: a length predictor has something real to learn.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from simulator.protocol import FinishReason


def estimate_prompt_tokens(chars: int) -> int:
    """Tokens of a prompt of ``chars`` characters: ``ceil(chars / 4)``, at least 1."""
    return max(1, (chars + 3) // 4)


def prompt_hash(text: str, seed: int) -> int:
    """A stable 64-bit hash of the prompt text, mixed with the seed."""
    digest = hashlib.blake2b(
        text.encode("utf-8", "surrogatepass"), digest_size=8, key=seed.to_bytes(8, "little")
    )
    return int.from_bytes(digest.digest(), "little")


def natural_length(key: int, median: int, sigma: float, limit: int) -> int:
    """The output length the "model" wants for this prompt: log-normal around ``median``."""
    # Two uniforms from disjoint halves of the hash, then Box-Muller for one normal draw.
    u1 = ((key & 0xFFFFFFFF) + 0.5) / 2**32
    u2 = ((key >> 32) + 0.5) / 2**32
    z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    return max(1, min(limit, round(median * math.exp(sigma * z))))


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """How long one response will be, and why it ends."""

    tokens: int
    finish_reason: FinishReason


def plan_output(
    natural: int,
    max_tokens: int | None,
    min_tokens: int,
    ignore_eos: bool,
    room: int,
) -> OutputPlan:
    """Combine the natural length with the request's limits.

    ``room`` is what the context window leaves after the prompt; it caps like an implicit
    ``max_tokens``. ``ignore_eos`` makes the output exactly the cap; ``min_tokens`` lifts
    the natural length. The reason is "length" when the cap cut the output short, "stop"
    when the output ended by itself.
    """
    cap = room if max_tokens is None else min(max_tokens, room)
    wanted = math.inf if ignore_eos else max(natural, min_tokens)
    if wanted > cap:
        return OutputPlan(tokens=cap, finish_reason=FinishReason.LENGTH)
    return OutputPlan(tokens=int(wanted), finish_reason=FinishReason.STOP)
