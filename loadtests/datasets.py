"""Prompts with their real reply lengths, from the project's data folder or a shipped sample.

The data folder holds prompt -> length JSONL files (``shared/data/README.md``). When a
source's files are missing, the small committed sample in ``loadtests/samples/`` is used
instead (GSM8K and HumanEval rows, MIT-licensed; see ``samples/PROVENANCE.md``), and
when that is missing too, synthetic prompts: the tool works from a bare checkout.

AlpacaEval rows carry the reply lengths of several generators; ``generator`` picks one
of them (``response_tokens_cl100k_by_model``) instead of the primary model's. Rows
without that generator's length are left out, and so is the shipped sample, which has
no such lengths: a generator's lengths are never made up.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import orjson

SOURCE_FILES: dict[str, tuple[str, ...]] = {
    "sharegpt": ("sharegpt_v3_first_turn.part01.jsonl", "sharegpt_v3_first_turn.part03.jsonl"),
    "gsm8k": ("gsm8k.part01.jsonl", "gsm8k.part02.jsonl"),
    "alpaca": ("alpaca_eval_multi_model_lengths.jsonl",),
    "humaneval": ("humaneval.jsonl",),
}
SAMPLE_FILE = "prompts_sample.jsonl"

_WORDS = (
    "the model answers a question about data and time in the city while people write short notes on "
    "history science music travel food health money code games weather plans ideas stories"
).split()


@dataclass(frozen=True, slots=True)
class PromptRow:
    text: str
    prompt_tokens: int  # cl100k count when the file has it, else chars / 4
    response_tokens: int  # the real reply's length (cl100k when present)
    source: str


def synthetic_text(tokens: int, rng: random.Random) -> str:
    """About ``tokens`` tokens of filler text (four characters a token, as the simulator counts)."""
    words: list[str] = []
    chars = 0
    target = max(1, tokens) * 4
    while chars < target:
        w = rng.choice(_WORDS)
        words.append(w)
        chars += len(w) + 1
    return " ".join(words)[:target]


def _row(obj: dict[str, object], source: str, generator: str | None = None) -> PromptRow | None:
    text = obj.get("prompt")
    if not isinstance(text, str) or not text.strip():
        return None
    ptok = obj.get("prompt_tokens_cl100k")
    if generator is not None:
        by_model = obj.get("response_tokens_cl100k_by_model")
        rtok = by_model.get(generator) if isinstance(by_model, dict) else None
    else:
        rtok = obj.get("response_tokens_cl100k")
        if not isinstance(rtok, int):
            rtok = obj.get("response_tokens_est")
    if not isinstance(rtok, int) or rtok < 1:
        return None
    origin = source or str(obj.get("source", "sample"))
    return PromptRow(text, ptok if isinstance(ptok, int) else max(1, len(text) // 4), rtok, origin)


def read_rows(path: Path, source: str, max_prompt_tokens: int, generator: str | None = None) -> list[PromptRow]:
    rows = []
    with path.open("rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = _row(orjson.loads(line), source, generator)
            if row is not None and row.prompt_tokens <= max_prompt_tokens:
                rows.append(row)
    return rows


class PromptCatalog:
    """Reads each source once, on first use. ``origin`` says where each source came from."""

    def __init__(self, data_dir: Path | None, max_prompt_tokens: int = 8000) -> None:
        self.data_dir = data_dir
        self.max_prompt_tokens = max_prompt_tokens
        self.origin: dict[str, str] = {}
        self._rows: dict[tuple[str, str | None], list[PromptRow]] = {}
        self._sample: list[PromptRow] | None = None

    def rows(self, source: str, generator: str | None = None) -> list[PromptRow]:
        """Rows of ``source`` (with ``generator``'s reply lengths, if given); empty for
        ``synthetic`` or when nothing at all is available."""
        if source == "synthetic":
            self.origin[source] = "synthetic"
            return []
        key = (source, generator)
        if key not in self._rows:
            self._rows[key] = self._load(source, generator)
        return self._rows[key]

    def _load(self, source: str, generator: str | None) -> list[PromptRow]:
        name = source if generator is None else f"{source} ({generator})"
        files = [self.data_dir / f for f in SOURCE_FILES[source]] if self.data_dir else []
        if files and all(f.is_file() for f in files):
            rows = [r for f in files for r in read_rows(f, source, self.max_prompt_tokens, generator)]
            self.origin[name] = str(self.data_dir) if rows else f"{self.data_dir}: no rows"
            return rows
        if generator is not None:
            self.origin[name] = "none (no data folder; the shipped sample has no per-generator lengths)"
            return []
        sample = self.sample()
        same = [r for r in sample if r.source.startswith(source)]
        if sample:
            self.origin[source] = f"shipped sample ({'same source' if same else 'other sources'})"
            return same or sample
        self.origin[source] = "synthetic (no data found)"
        return []

    def sample(self) -> list[PromptRow]:
        if self._sample is None:
            ref = resources.files("loadtests") / "samples" / SAMPLE_FILE
            self._sample = []
            if ref.is_file():
                for line in ref.read_bytes().splitlines():
                    row = _row(orjson.loads(line), "") if line.strip() else None
                    if row is not None:
                        self._sample.append(row)
        return self._sample
