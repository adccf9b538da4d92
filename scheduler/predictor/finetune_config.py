"""Settings of the fine-tuned predictor, and the shapes its training passes around."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.predictor.lexical import PredictorConfig

EXTRA_HINT = (
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


def clip(text: str, config: FinetuneConfig) -> str:
    """The characters that can reach the window (a word piece is rarely over 8 of them):
    bounds the tokenizer's work and the refit log's memory on huge prompts."""
    head, tail = 8 * config.max_pieces, 8 * config.tail_pieces
    return text if len(text) <= head + tail else text[:head] + " " + text[-tail:]
