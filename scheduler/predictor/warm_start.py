"""The shipped warm start of the lexical predictor: what it knows on day one.

A fresh install has learned nothing, and the 250-token prior sits just under the
256-token short threshold, so every request would be called short until enough
replies were seen. The warm start is the state of a ``LengthPredictor`` trained
offline on public prompt -> length data (``scheduler/predictor/tools/warm_start.py``
builds it; ``docs/predictor.md`` has its data, licences and figures). It is loaded
as a *local base* under whatever the fleet learns (``SharedState.load_base``): no
replica pushes it, so the shared hash in Redis holds only what was learned online,
and learning goes on from the first request.

Only the sums of the linear model travel: feature weights (``w:``), their AdaGrad
sums (``g:``), the residual histogram (``h:``) and the observation count (``n``).
Template corrections (``s:``/``c:``, ``kc:``/``kh:``) belong to one deployment's
models, tenants and system prompts, so they are left out.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson

#: The file shipped inside the package; ``predictor_warm_start: builtin`` names it.
BUILTIN = Path(__file__).with_name("data") / "warm_start.json.gz"

#: The field families a warm start may carry (see the module docstring).
KEPT_PREFIXES = ("w:", "g:", "h:")


def keep(field: str) -> bool:
    """Whether a field of a trained state belongs in a warm start."""
    return field == "n" or field.startswith(KEPT_PREFIXES)


def load(path: Path) -> dict[str, float]:
    """The fields of a warm-start file (JSON, gzip-compressed when it ends in ``.gz``).

    Fields a warm start must not carry are dropped, so a full ``snapshot()`` written by
    ``triage predictor eval --save-warm-start`` loads the same way.
    """
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    values = orjson.loads(raw)
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a warm start is a JSON object of field -> number")
    return {str(k): float(v) for k, v in values.items() if keep(str(k))}


def prune(values: dict[str, float], min_g: float) -> dict[str, float]:
    """Drop the weights of features seen too rarely to trust (AdaGrad sum below ``min_g``).

    Most of the hashed vocabulary is words met once or twice offline: their weights
    are large (AdaGrad steps rare features far) and mostly noise on other traffic,
    and they are nine tenths of the file.
    """
    out: dict[str, float] = {}
    for field, value in values.items():
        if field.startswith(("w:", "g:")) and values.get("g:" + field[2:], 0.0) < min_g:
            continue
        out[field] = value
    return out


def dump(values: dict[str, float], path: Path, digits: int = 4) -> int:
    """Write the kept fields, rounded, gzip-compressed with a fixed mtime (so a rebuild
    from the same data is byte-identical); returns the number of fields written."""
    kept = {k: round(v, digits) for k, v in sorted(values.items()) if keep(k) and round(v, digits) != 0.0}
    path.write_bytes(gzip.compress(orjson.dumps(kept), compresslevel=9, mtime=0))
    return len(kept)
