"""The requests of a run: class, prompt and output length of each, decided by a seeded RNG.

A workload that tells the length (``lengths: max_tokens``) has every request ask for
exactly its planned output length: ``max_tokens`` with ``ignore_eos: true``, so any
engine (vLLM, SGLang, the simulator) produces that many tokens. A workload that hides
it (``lengths: hidden``) sends the prompt alone; each prompt then has one true length
(the first row of a prompt listed twice wins), which ``true_lengths()`` lists for a
backend that can stop there (the simulator's length table). Either way the same length
can go out as ``x-triage-oracle-tokens``, the oracle policy's input.

Prompts are split in two parts by a hash of their text: one in four teaches the
predictor before a comparison (``Part.TRAIN``), the rest are measured (``Part.MEASURE``),
so the predictor is never taught the replies it is then measured on.
"""

from __future__ import annotations

import enum
import hashlib
import math
import random
from dataclasses import dataclass

from loadtests.datasets import PromptCatalog, PromptRow, synthetic_text
from loadtests.traces import TraceRow
from loadtests.workload import Lengths, OutputRule, RequestClass, Workload, WorkloadError

TRAIN_EVERY = 4  # one prompt in this many belongs to the training part


class Part(enum.StrEnum):
    """Which prompts a factory draws from."""

    ALL = "all"
    TRAIN = "train"
    MEASURE = "measure"


def stable_hash(text: str) -> int:
    """A hash of ``text`` that is the same in every run and on every machine."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def part_of(text: str) -> Part:
    """The part a prompt belongs to, the same in every run and on every machine."""
    return Part.TRAIN if stable_hash(text) % TRAIN_EVERY == 0 else Part.MEASURE


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    index: int  # order of planning (and of sending, in an open-loop run)
    cls: str
    prompt: str
    prompt_tokens: int  # estimate, for total TPS when the server reports no usage
    max_tokens: int  # the planned (true) output length
    at_s: float | None = None  # send offset; None in a closed loop
    api_key: str | None = None
    tier: str | None = None
    send_max_tokens: bool = True  # False: the length is hidden, only the prompt goes out
    stream: bool | None = None  # None: as the target streams; False: this one asks for its answer whole


def draw_length(rule: OutputRule, rng: random.Random) -> int:
    if rule.kind == "fixed":
        return rule.value
    if rule.kind == "lognormal":
        n = round(rule.median * math.exp(rule.sigma * rng.gauss(0.0, 1.0)))
    else:  # uniform, and dataset without rows
        n = rng.randint(rule.min, rule.max)
    return max(rule.min, min(rule.max, n))


def one_length_per_prompt(pools: dict[tuple[str, str], list[PromptRow]]) -> dict[tuple[str, str], list[PromptRow]]:
    """The pools with each prompt text kept once, at its first row (classes, then sources, in order)."""
    seen: set[str] = set()
    out: dict[tuple[str, str], list[PromptRow]] = {}
    for key, rows in pools.items():
        kept = []
        for r in rows:
            if r.text not in seen:
                seen.add(r.text)
                kept.append(r)
        out[key] = kept
    return out


class RequestFactory:
    """Plans request number ``i`` of a workload; the same seed gives the same requests."""

    def __init__(self, workload: Workload, catalog: PromptCatalog, seed: int, part: Part = Part.ALL) -> None:
        self._w = workload
        self._rng = random.Random(seed)
        self._hidden = workload.lengths is Lengths.HIDDEN
        pools: dict[tuple[str, str], list[PromptRow]] = {}
        for c in workload.classes:
            for source in c.prompts:
                rows = catalog.rows(source, c.generator)
                if c.output.kind == "dataset":
                    rows = [r for r in rows if c.output.min <= r.response_tokens <= c.output.max]
                pools[(c.name, source)] = rows
        if self._hidden:
            pools = one_length_per_prompt(pools)
        self._true = {r.text: r.response_tokens for rows in pools.values() for r in rows} if self._hidden else {}
        if part is not Part.ALL:
            pools = {k: [r for r in rows if part_of(r.text) is part] for k, rows in pools.items()}
        self._pools = pools
        self._shares = [c.share for c in workload.classes]
        if self._hidden:
            # hidden lengths are real ones only: a class without rows is not sent
            self._shares = [c.share if self._sources(c) else 0.0 for c in workload.classes]
            if sum(self._shares) <= 0:
                raise WorkloadError(f"workload {workload.name}: no prompt rows with real reply lengths "
                                    f"for any class ({part.value} part); give --data-dir")

    def true_lengths(self) -> dict[str, int]:
        """Every prompt this workload can send (any part) and its true length; empty unless lengths are hidden."""
        return dict(self._true)

    def _sources(self, c: RequestClass) -> list[str]:
        return [s for s in c.prompts if self._pools[(c.name, s)]]

    def _tenant(self) -> str | None:
        tenants = self._w.tenants
        if not tenants:
            return None
        return self._rng.choices([t.key for t in tenants], [t.share for t in tenants])[0]

    def _prompt(self, c: RequestClass) -> tuple[str, int, int | None]:
        """Prompt text, its tokens, and its real reply length (None for synthetic text)."""
        sources = self._sources(c) if self._hidden else c.prompts
        rows = self._pools[(c.name, self._rng.choice(sources))]
        if rows:
            row = self._rng.choice(rows)
            return row.text, row.prompt_tokens, row.response_tokens
        tokens = self._rng.randint(*c.synthetic_prompt_tokens)
        return synthetic_text(tokens, self._rng), tokens, None

    def next(self, index: int, at_s: float | None = None) -> PlannedRequest:
        """A request drawn from the class mix."""
        c = self._rng.choices(self._w.classes, self._shares)[0]
        text, ptok, real = self._prompt(c)
        out = real if c.output.kind == "dataset" and real is not None else draw_length(c.output, self._rng)
        return PlannedRequest(index, c.name, text, ptok, out, at_s, self._tenant(), c.tier, not self._hidden,
                              self._stream(index, text, out))

    def _stream(self, index: int, text: str, out: int) -> bool | None:
        """False for the workload's unstreamed share of long replies; None (the target's way) otherwise."""
        u = self._w.unstreamed
        if u is None or out <= u.over_tokens:
            return None
        return False if stable_hash(f"{index}|{text}") % 10_000 < u.share * 10_000 else None

    def from_trace(self, index: int, row: TraceRow, at_s: float | None = None) -> PlannedRequest:
        """A request with a trace row's lengths: filler prompt of its input length."""
        c = self.class_for(row.output_tokens)
        limit = self._w.trace.max_prompt_tokens if self._w.trace else row.input_tokens
        ptok = min(row.input_tokens, limit)
        return PlannedRequest(index, c.name, synthetic_text(ptok, self._rng), ptok, row.output_tokens, at_s,
                              self._tenant(), c.tier)

    def class_for(self, output_tokens: int) -> RequestClass:
        """The first class whose ``max_output_tokens`` holds ``output_tokens`` (the last one otherwise)."""
        for c in self._w.classes:
            if c.max_output_tokens is not None and output_tokens <= c.max_output_tokens:
                return c
        return self._w.classes[-1]
