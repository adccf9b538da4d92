"""Known output lengths: prompts whose natural length is given instead of drawn.

A benchmark client that knows each prompt's true reply length (from a dataset) can put
it in a JSON-lines file and send the prompts without ``max_tokens``: the simulator then
ends each reply at its true length, something a gateway cannot read from the request.
Each line is one object:

- ``{"prompt": "<text>", "output_tokens": <int>}``: matches a completions request whose
  original prompt is that text, and a chat request whose last user message is;
- ``{"messages": [...], "output_tokens": <int>}``: matches a chat request whose last user
  message has the content of the last user message in ``messages``.

The "original prompt" is the prompt before any of the model's own words (see
``simulator/prompts.py``), so a continuation of a listed request is matched too, and
stops where the whole reply would have. A completions row whose prompt ends in
vocabulary words is stored under the text before them, with those words counted into
its length, the way such a request is read. Blank lines are skipped; where a prompt is
listed twice, the later row wins. The file is read once, at start-up; any bad line is a
``LengthTableError`` naming the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson

from simulator.prompts import content_text
from simulator.protocol import ApiError, Endpoint, Prompt
from simulator.textgen import Vocabulary


class LengthTableError(ValueError):
    """The length table file cannot be read or has a bad line."""


@dataclass(frozen=True, slots=True)
class LengthTable:
    """Natural output lengths by what a request is matched on."""

    chat: MappingProxyType[str, int]  # last user message content -> output tokens
    completions: MappingProxyType[str, int]  # original prompt -> output tokens counted from it

    def natural(self, endpoint: Endpoint, prompt: Prompt) -> int | None:
        """The listed natural length of a request with ``prompt``, counted from its original prompt."""
        if prompt.table_key is None:
            return None
        table = self.chat if (prompt.origin or endpoint) is Endpoint.CHAT else self.completions
        return table.get(prompt.table_key)


def load_length_table(path: str | Path, vocab: Vocabulary) -> LengthTable:
    """Read a JSON-lines length table. Raises ``LengthTableError``."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise LengthTableError(f"cannot read length table {path}: {exc.strerror or exc}") from None
    chat: dict[str, int] = {}
    completions: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            text, tokens, from_messages = _row(line)
        except ValueError as exc:
            raise LengthTableError(f"length table {path}, line {number}: {exc}") from None
        chat[text] = tokens
        if not from_messages:
            run = vocab.trailing_run(text)
            completions[text[: run.head]] = tokens + run.length
    return LengthTable(chat=MappingProxyType(chat), completions=MappingProxyType(completions))


def _row(line: bytes) -> tuple[str, int, bool]:
    """One row's matched text, its output length, and whether it came from ``messages``."""
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(row, dict):
        raise ValueError("each line must be a JSON object")
    tokens = row.get("output_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError("'output_tokens' must be an integer >= 1")
    if ("prompt" in row) == ("messages" in row):
        raise ValueError("each row needs exactly one of 'prompt' and 'messages'")
    if "prompt" in row:
        if not isinstance(row["prompt"], str):
            raise ValueError("'prompt' must be a string")
        return row["prompt"], tokens, False
    return _last_user_message(row["messages"]), tokens, True


def _last_user_message(messages: Any) -> str:
    if not isinstance(messages, list):
        raise ValueError("'messages' must be a list")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise ValueError("'messages' has no user message")
    try:
        return content_text(users[-1].get("content"))
    except ApiError as exc:
        raise ValueError(exc.message) from None
