"""Output-length predictor: how many tokens will this request generate?

An online linear model of ``log(output tokens)`` over hashed lexical features of the
prompt (see :mod:`scheduler.predictor.features`), trained with AdaGrad on every
completed request, plus a fast per-template correction: the shrunk mean residual of
recent requests with the same model, tenant and system prompt. Before
``min_observations`` the source says PRIOR; the estimate then starts at
``prior_tokens`` (or the shipped warm start, when configured).

The client's length hint and its ``max_tokens`` cap are not applied here: the
classifier applies both, once, to every predictor's answer (``policy/classify.py``'s
``bound``). ``max_tokens`` is still evidence, though: it is a feature, and per
template the predictor counts how often a capped request ran to its cap. Where that is
the rule (fixed-length batch jobs, clients that size ``max_tokens`` to the task,
benchmarks with ``ignore_eos``), the estimate moves towards the cap in proportion (in
log space); where caps are generous (many clients send 4096 on everything) it stays
where the text model put it.

The upper quantile comes from a histogram of log-space residuals measured before
each update (progressive validation), so it tracks how wrong the model really is.

``predict`` and ``observe`` are synchronous and in memory. ``push`` and ``pull``
share the learned sums through Redis (:mod:`scheduler.predictor.store`); the
gateway calls them every few seconds from a background task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.predictor import warm_start
from scheduler.predictor.features import FeatureSpec, extract, template_key
from scheduler.predictor.store import SharedState
from scheduler.queue.keys import DEFAULT_PREFIX, predictor_key
from scheduler.types import PredictInput, Prediction, PredictionSource

# Residual histogram: bins of 0.1 in log space (about 10%) from -4 to +4.
_BIN_WIDTH = 0.1
_BIN_LOW = -4.0
_BINS = 80
_MAX_LOG = math.log(1_000_000)  # bounds exp() whatever the weights say
# a feature: its slot (the state keeps its weight under the slot, its squared-gradient sum
# under ~slot: store.key_of) and its value
Feature = tuple[int, float]


_READ_KEPT = 512  # requests between predict and observe whose features are kept (and prompts held)


@dataclass(frozen=True, slots=True)
class PredictorConfig:
    """Typed settings of one predictor; parsed at the edge, passed down."""

    name: str = "default"  # the shared state lives at predictor_key(name, prefix)
    prefix: str = DEFAULT_PREFIX
    prior_tokens: float = 250.0  # cold start: ShareGPT's median reply is ~240 cl100k tokens
    prior_upper_ratio: float = 3.0  # cold start: upper = ratio x tokens (ShareGPT p90/p50 ~ 2.3)
    learning_rate: float = 0.05  # AdaGrad step; per-feature steps shrink as 1/sqrt(sum g^2)
    huber: float = 1.0  # clip of the log-space error: a 1-token reply must not swing the model
    min_observations: int = 50  # until then the source is PRIOR
    quantile: float = 0.9  # of the upper estimate
    min_residuals: int = 50  # residuals needed before the histogram replaces prior_upper_ratio
    template_shrink: float = 20.0  # correction = sum / (count + shrink)
    template_window: float = 400.0  # halve a template's sums past this count: recent data weighs more
    cap_hit_ratio: float = 0.95  # a reply this close to its max_tokens ran to the cap
    cap_shrink: float = 10.0  # share of capped replies that hit the cap = hits / (count + shrink)
    features: FeatureSpec = field(default_factory=FeatureSpec)
    warm_start: Path | None = None  # fields -> values (warm_start.BUILTIN, or --save-warm-start's JSON)


class LengthPredictor:
    """Predicts output tokens; learns from the lengths it is shown afterwards."""

    def __init__(self, config: PredictorConfig | None = None) -> None:
        self.config = config or PredictorConfig()
        self._key = predictor_key(self.config.name, self.config.prefix)
        self._state = SharedState(_BINS)
        self._prior_log = math.log(max(1.0, self.config.prior_tokens))
        # features read at predict, kept for the observe that follows: the text is read once
        # per request (reading it is most of what either call costs)
        self._read: dict[PredictInput, list[Feature]] = {}
        if self.config.warm_start is not None:
            self._state.load_base(warm_start.load(self.config.warm_start))

    @property
    def observations(self) -> float:
        """Requests learned from, by all replicas (as of the last pull) plus this one."""
        return self._state.get("n")

    # Deciding.

    def predict(self, inp: PredictInput) -> Prediction:
        """How many output tokens will this request generate, by its text? Not yet bounded
        by its hint or its cap: the classifier applies those."""
        cap = inp.max_tokens if inp.max_tokens is not None and inp.max_tokens > 0 else None
        x = extract(inp, self.config.features)
        self._remember(inp, x)
        linear = self._linear(x)
        group = template_key(inp)
        z = min(_MAX_LOG, max(0.0, linear + self._correction(group)))
        if cap is not None and math.exp(z) < cap:
            # where this template's replies run to their cap, the cap is the estimate
            z += self._cap_hits(group) * (math.log(cap) - z)
        tokens = math.exp(z)
        upper = max(tokens, math.exp(min(_MAX_LOG, z + self._upper_offset())))
        learned = self._state.get("n") >= self.config.min_observations
        source = PredictionSource.LEARNED if learned else PredictionSource.PRIOR
        return Prediction(tokens=tokens, upper=upper, source=source)

    # Learning.

    def observe(self, inp: PredictInput, actual_tokens: int) -> None:
        """Learn from one finished request (its real output token count).

        Requests that came with a hint are learned from too: the text is the same
        kind of evidence, and later requests of that app may come without one.
        """
        state = self._state
        cfg = self.config
        y = math.log(max(1, actual_tokens))
        x = self._read.pop(inp, None)
        if x is None:
            x = extract(inp, cfg.features)
        linear = self._linear(x)
        group = template_key(inp)

        # Progressive validation: residual of the full prediction, before learning.
        residual = y - (linear + self._correction(group))
        index = int((residual - _BIN_LOW) / _BIN_WIDTH)
        state.add_bin(min(_BINS - 1, max(0, index)), 1.0)

        # AdaGrad on the Huber loss of the linear part.
        error = max(-cfg.huber, min(cfg.huber, linear - y))
        rate = cfg.learning_rate
        get = state.get
        add = state.add
        # state.add inlined (the same sums, in the same order): this loop runs for every
        # feature of every finished request, and the calls were most of its cost
        values, pending, sqrt = state.values, state.pending, math.sqrt
        for weight, value in x:
            grad = error * value
            if grad == 0.0:
                continue
            squares = ~weight
            g = grad * grad
            g2 = values.get(squares, 0.0) + g
            values[squares] = g2
            pending[squares] = pending.get(squares, 0.0) + g
            step = -rate * grad / sqrt(g2)
            values[weight] = values.get(weight, 0.0) + step
            pending[weight] = pending.get(weight, 0.0) + step

        # The template correction learns the linear model's residual on that template;
        # it reacts within tens of requests, where the hashed template weight needs
        # hundreds. The linear model takes over as it learns, and the window forgets.
        count = get(f"c:{group}")
        if count >= cfg.template_window:
            add(f"s:{group}", -0.5 * get(f"s:{group}"))
            add(f"c:{group}", -0.5 * count)
        add(f"s:{group}", y - linear)
        add(f"c:{group}", 1.0)
        if inp.max_tokens is not None and inp.max_tokens > 0:
            capped = get(f"kc:{group}")
            if capped >= cfg.template_window:
                add(f"kh:{group}", -0.5 * get(f"kh:{group}"))
                add(f"kc:{group}", -0.5 * capped)
            add(f"kc:{group}", 1.0)
            if actual_tokens >= cfg.cap_hit_ratio * inp.max_tokens:
                add(f"kh:{group}", 1.0)
        add("n", 1.0)

    # Sharing.

    async def push(self, redis: Any) -> None:
        """Flush what this replica learned since the last push (HINCRBYFLOAT, one pipeline)."""
        await self._state.push(redis, self._key)

    async def pull(self, redis: Any) -> None:
        """Load the state merged from every replica (HGETALL, skipped when unchanged)."""
        await self._state.pull(redis, self._key)

    def snapshot(self) -> dict[str, float]:
        """Every learned sum, e.g. to write a warm-start file."""
        return self._state.snapshot()

    # Internals.

    def _remember(self, inp: PredictInput, x: list[Feature]) -> None:
        """Keep a request's features until it is observed; bounded, oldest first out (a
        request that never finishes, or one predicted but never observed, is forgotten)."""
        read = self._read
        read[inp] = x
        if len(read) > _READ_KEPT:
            del read[next(iter(read))]

    def _linear(self, x: list[Feature]) -> float:
        values = self._state.values
        total = self._prior_log
        for slot, value in x:
            weight = values.get(slot)
            if weight is not None:
                total += weight * value
        return total

    def _correction(self, group: str) -> float:
        count = self._state.get(f"c:{group}")
        if count <= 0.0:
            return 0.0
        return self._state.get(f"s:{group}") / (count + self.config.template_shrink)

    def _cap_hits(self, group: str) -> float:
        """Share of this template's capped replies that ran to the cap (shrunk to 0)."""
        count = self._state.get(f"kc:{group}")
        if count <= 0.0:
            return 0.0
        return self._state.get(f"kh:{group}") / (count + self.config.cap_shrink)

    def _upper_offset(self) -> float:
        """Log-space offset of the upper quantile above the point estimate."""
        hist = self._state.hist
        total = sum(hist)
        if total < self.config.min_residuals:
            return math.log(self.config.prior_upper_ratio)
        # The point estimate sits at the residuals' median; the offset is the distance
        # from the median bin to the quantile bin, so a biased model does not shift it.
        median = _quantile_of(hist, 0.5 * total)
        upper = _quantile_of(hist, self.config.quantile * total)
        return max(0.0, upper - median)


def _quantile_of(hist: list[float], rank: float) -> float:
    """Log-space value at a cumulative count in the residual histogram."""
    seen = 0.0
    for index, count in enumerate(hist):
        seen += count
        if seen >= rank:
            return _BIN_LOW + (index + 0.5) * _BIN_WIDTH
    return _BIN_LOW + _BINS * _BIN_WIDTH
