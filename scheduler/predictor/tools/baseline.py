"""Baseline for the predictor benchmark: ridge regression on TF-IDF word 1-2 grams.

It predicts log(output tokens), like the online model, but is fitted in one batch
on all training rows, so it shows what a plain text regressor reaches on the same
data. Pure Python so the benchmark needs no numpy: the tokenizer and weighting copy
scikit-learn's defaults (``(?u)\\b\\w\\w+\\b``, sublinear tf, smooth idf, L2-normalised
rows), and the ridge system ``(X'X + alpha I) w = X'(y - mean)`` is solved exactly
(to a tolerance) by conjugate gradients on sparse rows. Eval-only code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

_TOKEN = re.compile(r"(?u)\b\w\w+\b")

Row = list[tuple[int, float]]


class TfidfRidge:
    """Fit on (text, tokens) pairs; predict log tokens."""

    def __init__(self, alpha: float = 1.0, max_iter: int = 200, tol: float = 1e-6) -> None:
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol
        self._vocab: dict[str, int] = {}
        self._idf: list[float] = []
        self._w: list[float] = []
        self._mean = 0.0

    @staticmethod
    def _terms(text: str) -> dict[str, int]:
        words = _TOKEN.findall(text.lower())
        counts: dict[str, int] = {}
        for term in words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]:
            counts[term] = counts.get(term, 0) + 1
        return counts

    def _row(self, text: str) -> Row:
        row = []
        for term, count in self._terms(text).items():
            j = self._vocab.get(term)
            if j is not None:
                row.append((j, (1.0 + math.log(count)) * self._idf[j]))
        norm = math.sqrt(sum(v * v for _, v in row))
        return [(j, v / norm) for j, v in row] if norm > 0 else row

    def fit(self, texts: Sequence[str], tokens: Sequence[int]) -> TfidfRidge:
        docs = [self._terms(t) for t in texts]
        df: dict[str, int] = {}
        for doc in docs:
            for term in doc:
                df[term] = df.get(term, 0) + 1
        self._vocab = {term: j for j, term in enumerate(df)}
        n = len(docs)
        self._idf = [math.log((1 + n) / (1 + df[term])) + 1.0 for term in df]
        rows = [self._row(t) for t in texts]
        y = [math.log(max(1, t)) for t in tokens]
        self._mean = sum(y) / len(y)
        b = _xt(rows, [v - self._mean for v in y], len(self._vocab))
        self._w = self._cg(rows, b)
        return self

    def _cg(self, rows: list[Row], b: list[float]) -> list[float]:
        dim = len(b)
        w = [0.0] * dim
        r = list(b)
        p = list(r)
        rr = sum(v * v for v in r)
        stop = self.tol * self.tol * max(rr, 1e-300)
        for _ in range(self.max_iter):
            if rr <= stop:
                break
            ap = _xt(rows, _x(rows, p), dim)
            ap = [a + self.alpha * q for a, q in zip(ap, p, strict=True)]
            step = rr / sum(q * a for q, a in zip(p, ap, strict=True))
            w = [wi + step * q for wi, q in zip(w, p, strict=True)]
            r = [ri - step * a for ri, a in zip(r, ap, strict=True)]
            rr_next = sum(v * v for v in r)
            p = [ri + (rr_next / rr) * q for ri, q in zip(r, p, strict=True)]
            rr = rr_next
        return w

    def predict_log(self, text: str) -> float:
        return self._mean + sum(self._w[j] * v for j, v in self._row(text))


def _x(rows: list[Row], w: list[float]) -> list[float]:
    return [sum(w[j] * v for j, v in row) for row in rows]


def _xt(rows: list[Row], u: list[float], dim: int) -> list[float]:
    out = [0.0] * dim
    for row, ui in zip(rows, u, strict=True):
        if ui:
            for j, v in row:
                out[j] += v * ui
    return out
