"""The requests of a run: class, prompt and output length of each, decided by a seeded RNG.

Every request asks for exactly its planned output length: ``max_tokens`` with
``ignore_eos: true``, so any engine (vLLM, SGLang, the simulator) produces that many
tokens, and the same length goes out as ``x-triage-oracle-tokens`` (the oracle policy's
input; other policies ignore it).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from loadtests.datasets import PromptCatalog, PromptRow, synthetic_text
from loadtests.traces import TraceRow
from loadtests.workload import OutputRule, RequestClass, Workload


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


def draw_length(rule: OutputRule, rng: random.Random) -> int:
    if rule.kind == "fixed":
        return rule.value
    if rule.kind == "lognormal":
        n = round(rule.median * math.exp(rule.sigma * rng.gauss(0.0, 1.0)))
    else:  # uniform, and dataset without rows
        n = rng.randint(rule.min, rule.max)
    return max(rule.min, min(rule.max, n))


class RequestFactory:
    """Plans request number ``i`` of a workload; the same seed gives the same requests."""

    def __init__(self, workload: Workload, catalog: PromptCatalog, seed: int) -> None:
        self._w = workload
        self._rng = random.Random(seed)
        self._shares = [c.share for c in workload.classes]
        self._pools: dict[tuple[str, str], list[PromptRow]] = {}
        for c in workload.classes:
            for source in c.prompts:
                rows = catalog.rows(source)
                if c.output.kind == "dataset":
                    rows = [r for r in rows if c.output.min <= r.response_tokens <= c.output.max]
                self._pools[(c.name, source)] = rows

    def _tenant(self) -> str | None:
        tenants = self._w.tenants
        if not tenants:
            return None
        return self._rng.choices([t.key for t in tenants], [t.share for t in tenants])[0]

    def _prompt(self, c: RequestClass) -> tuple[str, int, int | None]:
        """Prompt text, its tokens, and its real reply length (None for synthetic text)."""
        rows = self._pools[(c.name, self._rng.choice(c.prompts))]
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
        return PlannedRequest(index, c.name, text, ptok, out, at_s, self._tenant(), c.tier)

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
