"""The text the simulator "generates": one short word per token, deterministic, and resumable.

The vocabulary is a fixed cycle of distinct words, each a space and a few letters, so
every word has exactly one successor. A response is a walk along that cycle: output
token ``i`` is word ``(first + i) mod len(WORDS)``. Each word is a single token under
common tokenizers, so a client that re-tokenizes the text gets about the reported count.

Where the walk starts, and how a continuation is recognised (``trailing_run``):

- The *run* of a text is its longest suffix of words that follow one another on the
  cycle (``" the model says"``); the *head* is what comes before it.
- A fresh prompt that does not end in a vocabulary word has no run: the walk starts at
  a word chosen by the prompt hash (``start_for``).
- A text that ends in a run is read as a prompt followed by that much output already
  generated: the walk goes on from the run's last word, and the head is the original
  prompt (it keys the output length). So sending "prompt + text so far" continues
  exactly where the first response was cut, and "prompt + text so far + the rest" is
  the same text whether or not it was cut.

Limits: a prompt that itself ends in vocabulary words (``"... say the"``) is read as
a continuation of its head; it still gets one deterministic reply, but its length is
keyed on the head. The run is found by whole words, so a continuation must hold whole
tokens as they were streamed (one frame is one word).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

WORDS = (
    " the", " model", " says", " hello", " and", " then", " it", " writes", " more", " words",
    " about", " a", " queue", " of", " tokens", " that", " arrive", " one", " after", " another",
    " from", " an", " engine", " which", " runs", " in", " steps", " with", " many", " requests",
    " at", " once",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Run:
    """The trailing run of a text: consecutive vocabulary words at its end."""

    head: int  # length of the text before the run
    length: int  # words in the run; 0 when the text does not end in a vocabulary word
    first: int  # vocabulary index of the run's first word (0 when the run is empty)


class Vocabulary:
    """Token texts, plain and pre-encoded as JSON strings for the SSE frames."""

    def __init__(self, words: tuple[str, ...] = WORDS) -> None:
        if len(set(words)) != len(words):
            raise ValueError("vocabulary words must be distinct (each needs one successor)")
        if any(len(w) < 2 or w[0] != " " or " " in w[1:] for w in words):
            raise ValueError("each vocabulary word must be a space followed by non-space characters")
        self.words = words
        self.json_words = tuple(orjson.dumps(w) for w in words)
        self._index = {w: i for i, w in enumerate(words)}

    def __len__(self) -> int:
        return len(self.words)

    def start_for(self, prompt_key: int) -> int:
        """The first word of a response to a prompt with no run, from its hash."""
        return prompt_key % len(self.words)

    def text(self, start: int, count: int) -> str:
        """The first ``count`` tokens of a response beginning at word ``start``."""
        words, n = self.words, len(self.words)
        return "".join(words[(start + i) % n] for i in range(count))

    def json_word(self, start: int, index: int) -> bytes:
        return self.json_words[(start + index) % len(self.json_words)]

    def trailing_run(self, text: str) -> Run:
        """The longest suffix of ``text`` made of words that follow one another on the cycle."""
        n = len(self.words)
        end, length, first = len(text), 0, 0
        while True:
            cut = text.rfind(" ", 0, end)
            if cut < 0:
                break
            i = self._index.get(text[cut:end])
            if i is None or (length and i != (first - 1) % n):
                break
            length, first, end = length + 1, i, cut
        return Run(head=end, length=length, first=first)
