"""The text the simulator "generates": one short word per token, deterministic.

Token ``i`` of a response is word ``(start + i) mod len(WORDS)``, where ``start`` comes
from the prompt hash, so the same prompt always gets the same text and different
prompts usually start at different words. Each word is a single token under common
tokenizers, so a client that re-tokenizes the text gets about the reported count.
"""

from __future__ import annotations

import orjson

WORDS = (
    " the", " model", " says", " hello", " and", " then", " it", " writes", " more", " words",
    " about", " a", " queue", " of", " tokens", " that", " arrive", " one", " by", " one",
    " from", " an", " engine", " which", " runs", " in", " steps", " with", " many", " requests",
    " at", " once",
)  # fmt: skip


class Vocabulary:
    """Token texts, plain and pre-encoded as JSON strings for the SSE frames."""

    def __init__(self, words: tuple[str, ...] = WORDS) -> None:
        self.words = words
        self.json_words = tuple(orjson.dumps(w) for w in words)

    def start_for(self, prompt_key: int) -> int:
        return prompt_key % len(self.words)

    def text(self, start: int, count: int) -> str:
        """The first ``count`` tokens of a response beginning at word ``start``."""
        words, n = self.words, len(self.words)
        return "".join(words[(start + i) % n] for i in range(count))

    def json_word(self, start: int, index: int) -> bytes:
        return self.json_words[(start + index) % len(self.json_words)]
