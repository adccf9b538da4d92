"""The token ids the simulator tells (vLLM's ``return_token_ids``), and a token-id prompt read back.

A paused stream is resumed exactly on vLLM by sending the prompt's token ids followed by
the ids of the tokens made so far to ``/v1/completions``. For the simulator to continue
such a prompt as it continues the text so far (``simulator/textgen.py``), both kinds of
id must be readable:

- **output**: word ``i`` of the vocabulary is token ``OUTPUT_BASE + i``; a prompt that
  ends in such ids, each the successor of the one before it on the cycle, ends in a run
  of the model's own output, as a text prompt that ends in vocabulary words does;
- **prompt**: an original prompt's ``tokens`` ids are drawn from its rendered text (the
  same text gives the same ids, in every process), all below ``OUTPUT_BASE``. The ids of
  each prompt told are remembered (``PromptRegistry``, one per process: every simulator
  of a fleet shares it), so a continuation's head is read back as the prompt it stands
  for — its natural length, its first word and its prefix-cache blocks are the same.
  Ids the registry does not hold (told by another process, or forgotten) are a fresh
  prompt keyed on the ids, as any token-id prompt was before.

llama.cpp tells no prompt ids: a paused stream there resumes from a *mixed* prompt, the
prompt's text followed by the output's ids (a chat prompt's text as ``/apply-template``
renders it). The registry remembers each rendering it gave, so such a prompt is read back
as the chat prompt continued; a completions prompt's text is read as text always is.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

from simulator.protocol import Endpoint, Prompt, PromptText

OUTPUT_BASE = 32000  # word i is token OUTPUT_BASE + i; prompt ids are below it
FIRST_PROMPT_ID = 1000  # prompt ids run from here to OUTPUT_BASE - 1
_MASK = (1 << 64) - 1


def word_id(word: int) -> int:
    return OUTPUT_BASE + word


def output_ids(first: int, count: int, words: int) -> list[int]:
    """The ids of ``count`` output words from word ``first`` on the cycle of ``words``."""
    return [OUTPUT_BASE + (first + i) % words for i in range(count)]


def prompt_ids(prompt: Prompt, words: int) -> list[int]:
    """The ids of ``prompt``: its original prompt's, then its run's (``words``: the vocabulary's
    size); a token-id prompt's are its own."""
    if prompt.ids is not None:
        return list(prompt.ids)
    text = prompt.text
    digest = hashlib.blake2b(text.rendered.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    x = int.from_bytes(digest, "little")
    span = OUTPUT_BASE - FIRST_PROMPT_ID
    ids = []
    for _ in range(prompt.tokens - prompt.run):
        x = (x * 6364136223846793005 + 1442695040888963407) & _MASK  # an LCG: cheap and the same everywhere
        ids.append(FIRST_PROMPT_ID + (x >> 33) % span)
    return ids + output_ids(prompt.run_start, prompt.run, words)


def _key(ids: Sequence[int]) -> bytes:
    return hashlib.blake2b(array("q", ids).tobytes(), digest_size=16).digest()


def _text_key(rendered: str) -> bytes:
    return hashlib.blake2b(rendered.encode("utf-8", "surrogatepass"), digest_size=16, person=b"rendered").digest()


def _run(ids: Sequence[int], words: int) -> tuple[int, int]:
    """The trailing run of output ids in ``ids``: its length and its first word."""
    end, run, first = len(ids), 0, 0
    while end > 0:
        w = ids[end - 1] - OUTPUT_BASE
        if not 0 <= w < words or (run and w != (first - 1) % words):
            break
        run, first, end = run + 1, w, end - 1
    return run, first


def output_words(ids: Sequence[int], words: int) -> list[int] | None:
    """The vocabulary words ``ids`` stand for, or None if any is not an output id."""
    out = [t - OUTPUT_BASE for t in ids]
    return out if all(0 <= w < words for w in out) else None


class PromptRegistry:
    """The original prompts whose ids were told, by their ids, and the chat prompts rendered
    for ``/apply-template`` (llama.cpp), by their text; the oldest forgotten past ``size``."""

    def __init__(self, size: int = 65536) -> None:
        self.size = size
        self._prompts: OrderedDict[bytes, tuple[str, str | None, PromptText, Endpoint]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._prompts)

    def remember(self, ids: Sequence[int], prompt: Prompt, endpoint: Endpoint) -> None:
        """``ids``: ``prompt``'s (``prompt_ids``), told on ``endpoint``; its original prompt's
        part is remembered (a token-id prompt's needs no remembering: its ids are its key)."""
        if prompt.ids is not None:
            return
        self._store(_key(ids[: len(ids) - prompt.run]), prompt, prompt.origin or endpoint)

    def remember_rendered(self, rendered: str, prompt: Prompt) -> None:
        """``rendered``: a chat ``prompt`` as the simulator renders it for llama.cpp's
        ``/apply-template``; a mixed prompt that begins with it stands for that prompt."""
        self._store(_text_key(rendered), prompt, Endpoint.CHAT)

    def _store(self, key: bytes, prompt: Prompt, origin: Endpoint) -> None:
        self._prompts[key] = (prompt.original, prompt.table_key, prompt.text, origin)
        self._prompts.move_to_end(key)
        while len(self._prompts) > self.size:
            self._prompts.popitem(last=False)

    def read_mixed(self, text: str, ids: Sequence[int], words: int) -> Prompt | None:
        """A mixed prompt (llama.cpp's: ``text`` then token ``ids``) whose text is a rendered
        chat prompt told by ``/apply-template`` and whose ids are a run of output: that chat
        prompt, continued. None otherwise."""
        run, first = _run(ids, words)
        key = _text_key(text)
        known = self._prompts.get(key) if run == len(ids) else None
        if known is None:
            return None
        self._prompts.move_to_end(key)
        original, table_key, prompt_text, origin = known
        return Prompt(original, table_key, prompt_text, run, first, None, origin)

    def read(self, ids: Sequence[int], words: int) -> Prompt:
        """A token-id prompt: the original prompt its head stands for (when remembered), and
        the run of output ids it ends in."""
        run, first = _run(ids, words)
        end = len(ids) - run
        head = ids[:end]
        key = _key(head)
        known = self._prompts.get(key) if head else None
        if known is not None:
            self._prompts.move_to_end(key)
            original, table_key, text, origin = known
            return Prompt(original, table_key, text, run, first, tuple(ids), origin)
        rendered = "".join(f"{t & 0xFFFFFFFF:08x}" for t in head)
        text = PromptText(rendered, len(head), ID_CHARS, ((len(rendered), len(rendered)),))
        return Prompt(",".join(map(str, head)), None, text, run, first, tuple(ids))


ID_CHARS = 8  # characters of one rendered token id (32 bits in hex)
REGISTRY = PromptRegistry()
