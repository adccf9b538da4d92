"""What resuming a paused generation costs a backend, read from its engine's own counters.

A continuation makes the engine read the prompt and the text so far again; what that
costs depends on the engine: how long it takes to compute one prompt token, how much of
a resume its prefix cache still holds, and in blocks of what size. vLLM says all of it
on ``/metrics``: the time its requests spent in prefill and the prompt tokens it
computed for them, its prefix cache's queries and hits (tokens), the time between
output tokens, and its cache block size (a label of ``cache_config_info``). The meter
keeps the counters of the last scrape and folds each interval's rates into a moving
average; where an engine shows nothing (other engines, no traffic yet), the gateway's
own measured time per output token and :class:`~scheduler.types.ResumeCost`'s defaults
stand in. Which names to read is the engine profile's business (``engines.py``).

Prefill time is fitted, not divided: a request's prefill costs a step's overhead besides
its tokens (on vLLM's CPU build about 15 ms, then 0.11-0.13 ms a token), so the time
over the tokens of short prompts overstates a token tenfold. Each interval gives its
requests, tokens and prefill seconds; a least-squares fit of seconds = overhead ×
requests + per-token × tokens over the recent intervals (older ones weigh less) gives
both. While the intervals cannot tell the two apart (every one with the same mean
prompt), the quotient stands, an upper bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from scheduler.types import ResumeCost

WEIGHT = 0.3  # of each new interval in the moving averages
KEEP = 0.9  # of the fit's sums at each new interval
# Where the engine does not say: a prompt token costs this share of an output token's
# time (engines compute prompt tokens in parallel; a decode step makes one token a stream)
PREFILL_SHARE = 0.05
_BLOCK = re.compile(r'block_size="(\d+)"')


@dataclass(frozen=True, slots=True)
class CostNames:
    """The engine's metric names the meter reads (counters and histogram sums/counts)."""

    prefill_time: str  # histogram: seconds its requests spent in prefill (_sum, _count)
    computed: str  # histogram of prompt tokens computed per request (_sum); "" : prompt - cached
    prompt: str  # counter: prompt tokens
    cached: str  # counter: prompt tokens found in the prefix cache
    queries: str  # counter: prefix-cache queries (tokens)
    hits: str  # counter: prefix-cache hits (tokens)
    token_time: str  # histogram: seconds between output tokens of a stream
    config: str  # info gauge with a block_size label


VLLM_COSTS = CostNames(
    prefill_time="vllm:request_prefill_time_seconds", computed="vllm:request_prefill_kv_computed_tokens",
    prompt="vllm:prompt_tokens_total", cached="vllm:prompt_tokens_cached_total",
    queries="vllm:prefix_cache_queries_total", hits="vllm:prefix_cache_hits_total",
    token_time="vllm:inter_token_latency_seconds", config="vllm:cache_config_info",
)


def read(text: str, names: CostNames) -> tuple[dict[str, float], int | None]:
    """The counters ``names`` names (summed over label sets), and the block size."""
    wanted = {
        names.prefill_time + "_sum", names.prefill_time + "_count", names.computed + "_sum", names.prompt, names.cached, names.queries, names.hits,
        names.token_time + "_sum", names.token_time + "_count",
    }
    sums: dict[str, float] = {}
    block: int | None = None
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        name = line[:brace] if brace >= 0 else line.split(" ", 1)[0]
        if name == names.config:
            if m := _BLOCK.search(line):
                block = int(m.group(1))
            continue
        if name not in wanted:
            continue
        try:
            value = float(line.rsplit("}", 1)[-1].split()[0] if brace >= 0 else line.split()[1])
        except (ValueError, IndexError):
            continue
        sums[name] = sums.get(name, 0.0) + value
    return sums, block


def _blend(old: float | None, new: float) -> float:
    return new if old is None else (1 - WEIGHT) * old + WEIGHT * new


@dataclass(slots=True)
class CostMeter:
    """One backend's resume cost, from the scrapes of its engine's ``/metrics``."""

    names: CostNames | None = None  # None: its engine shows no such counters
    tpot_s: float | None = None
    prefill_s: float | None = None
    hit: float | None = None
    block: int | None = None
    prefill_base_s: float = 0.0
    _last: dict[str, float] = field(default_factory=dict)
    _fit: list[float] = field(default_factory=lambda: [0.0] * 5)  # decayed sums: cc ct tt cy ty

    def observe(self, text: str) -> None:
        """Fold one scrape in: the rates since the last one."""
        if self.names is None:
            return
        n = self.names
        now, block = read(text, n)
        if block:
            self.block = block
        last, self._last = self._last, now

        def delta(name: str) -> float:
            d = now.get(name, 0.0) - last.get(name, 0.0)
            return d if name in now and name in last and d > 0 else 0.0  # a restart resets counters

        computed = delta(n.computed + "_sum") if n.computed else 0.0
        if computed <= 0:
            computed = delta(n.prompt) - delta(n.cached)
        if (prefill := delta(n.prefill_time + "_sum")) > 0 and computed > 0:
            self._fit_prefill(delta(n.prefill_time + "_count"), computed, prefill)
        if (queries := delta(n.queries)) > 0:
            self.hit = _blend(self.hit, min(1.0, delta(n.hits) / queries))
        if (count := delta(n.token_time + "_count")) > 0:
            self.tpot_s = _blend(self.tpot_s, delta(n.token_time + "_sum") / count)

    def _fit_prefill(self, requests: float, tokens: float, seconds: float) -> None:
        f = self._fit
        for i, v in enumerate((requests * requests, requests * tokens, tokens * tokens, requests * seconds,
                               tokens * seconds)):
            f[i] = KEEP * f[i] + v
        cc, ct, tt, cy, ty = f
        det = cc * tt - ct * ct
        if det > 1e-6 * cc * tt:  # the intervals' mean prompts differ enough to tell the two apart
            base, per_token = (cy * tt - ct * ty) / det, (cc * ty - ct * cy) / det
            if base >= 0 and per_token > 0:
                self.prefill_base_s, self.prefill_s = base, per_token
                return
        self.prefill_base_s, self.prefill_s = 0.0, _blend(self.prefill_s, seconds / tokens)

    def cost(self, measured_tpot_s: float | None = None) -> ResumeCost:
        """What a resume costs now: the engine's figures, else the gateway's measured time
        per output token (a prompt token: ``PREFILL_SHARE`` of it), else the defaults."""
        c = ResumeCost()
        tpot = self.tpot_s or measured_tpot_s
        prefill = self.prefill_s or (tpot * PREFILL_SHARE if tpot else c.prefill_s)
        return replace(
            c, tpot_s=tpot or c.tpot_s, prefill_s=prefill,
            hit=self.hit if self.hit is not None else c.hit, block=self.block or c.block,
            prefill_base_s=self.prefill_base_s if self.prefill_s else c.prefill_base_s,
        )
