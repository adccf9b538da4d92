"""What a sequence's KV blocks hold, as hashes the prefix cache can compare.

vLLM's automatic prefix caching keys each full block of ``block_size`` tokens by a hash
chained over every token before it, so two requests share a block exactly when they
share the whole prefix up to its end. The simulator has no tokenizer; its tokens are:

- the original prompt's text, cut every ``chars_per_token`` counted characters (the
  same estimate that counts prompt tokens), chat role marks riding with the first
  characters of their message;
- then the model's words, one per token: the run a continuation carries in its prompt
  and the output generated after it, which are the same words at the same positions.

So a request that repeats a prompt, or extends one (a shared system prompt, or a
continuation sending the original prompt plus the text so far) hashes its leading
blocks like the earlier request did.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from operator import itemgetter

from simulator.protocol import PromptText

_COUNTED_END = itemgetter(0)


class BlockHashes:
    """The chained hashes of one sequence's blocks, computed as far as they are asked for.

    ``text_tokens`` of the sequence's tokens are prompt text; token ``text_tokens + i`` is
    word ``(words_from + i) mod len(words)``.
    """

    __slots__ = ("block_size", "_text", "_text_tokens", "_words", "_words_from", "_hashes")

    def __init__(
        self, text: PromptText, text_tokens: int, words: tuple[str, ...], words_from: int, block_size: int
    ) -> None:
        self.block_size = block_size
        self._text = text
        self._text_tokens = text_tokens
        self._words = words
        self._words_from = words_from
        self._hashes: list[int] = []

    def __getitem__(self, index: int) -> int:
        """The hash of block ``index`` (tokens ``index * block_size`` up to the next block)."""
        hashes = self._hashes
        while len(hashes) <= index:
            prev = hashes[-1] if hashes else 0
            piece = self._piece(len(hashes)).encode("utf-8", "surrogatepass")
            digest = hashlib.blake2b(prev.to_bytes(8, "little") + piece, digest_size=8).digest()
            hashes.append(int.from_bytes(digest, "little"))
        return hashes[index]

    def _piece(self, index: int) -> str:
        start = index * self.block_size
        end = start + self.block_size
        split = self._text_tokens
        piece = ""
        if start < split:
            cpt = self._text.chars_per_token
            piece = self._text.rendered[self._cut(start * cpt) : self._cut(min(end, split) * cpt)]
        if end > split:
            words, n, base = self._words, len(self._words), self._words_from - split
            piece += "\x00" + "".join(words[(base + t) % n] for t in range(max(start, split), end))
        return piece

    def _cut(self, counted: int) -> int:
        """The offset in ``rendered`` of a counted-character offset."""
        text = self._text
        if counted <= 0:
            return 0
        if not text.ends or counted >= text.ends[-1][0]:
            return len(text.rendered)
        i = bisect_left(text.ends, counted, key=_COUNTED_END)
        counted_end, rendered_end = text.ends[i]
        return rendered_end - (counted_end - counted)
