"""Prometheus text (exposition format 0.0.4) for ``GET /metrics``, from ``instruments.Registry``.

Rendered here, without ``prometheus_client`` or the OpenTelemetry Prometheus
exporter: the instruments already hold cumulative state, so the page is a loop
over it (no second aggregation, no process-wide registry that two gateways in one
process would share, no package).

Names follow the OpenTelemetry-to-Prometheus mapping: dots become underscores, the
unit becomes a suffix (``s`` -> ``_seconds``; annotations such as ``{token}`` and
the unit ``1`` add nothing), counters end in ``_total`` — in the ``# HELP`` and
``# TYPE`` lines as in the samples, so a parser (``promtool check metrics``) finds
the help text of every sample; attribute keys become
labels the same way (``gen_ai.request.model`` -> ``gen_ai_request_model``). Labels
with an empty value are left out, as Prometheus treats them.
"""

from __future__ import annotations

import re

from gateway.telemetry.instruments import Counter, Gauge, Histogram, Instrument, Key, Registry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": ""}
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")
_INF = 'le="+Inf"'


def prom_name(name: str, unit: str = "") -> str:
    base = _INVALID.sub("_", name)
    suffix = "" if unit.startswith("{") else _UNITS.get(unit, _INVALID.sub("_", unit))
    if suffix and not base.endswith(f"_{suffix}"):
        base = f"{base}_{suffix}"
    return base


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: tuple[str, ...], key: Key, extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, key, strict=False) if v != ""]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _family(inst: Instrument, out: list[str]) -> None:
    name = prom_name(inst.name, inst.unit)
    if isinstance(inst, Counter) and not name.endswith("_total"):
        name = f"{name}_total"  # the family and its samples share the name
    names = tuple(_INVALID.sub("_", label) for label in inst.labels)
    kind = "counter" if isinstance(inst, Counter) else "histogram" if isinstance(inst, Histogram) else "gauge"
    out.append(f"# HELP {name} {_escape(inst.description)}")
    out.append(f"# TYPE {name} {kind}")
    if isinstance(inst, Counter):
        for key, value in inst.series.items():
            out.append(f"{name}{_labels(names, key)} {_number(value)}")
    elif isinstance(inst, Histogram):
        bounds = [_number(b) if b >= 1 else repr(b) for b in inst.bounds]
        for key, state in inst.series.items():
            running = 0
            for bound, count in zip(bounds, state.counts, strict=False):
                running += count
                le = 'le="' + bound + '"'
                out.append(f"{name}_bucket{_labels(names, key, le)} {running}")
            out.append(f"{name}_bucket{_labels(names, key, _INF)} {state.count}")
            out.append(f"{name}_sum{_labels(names, key)} {_number(state.sum)}")
            out.append(f"{name}_count{_labels(names, key)} {state.count}")
    elif isinstance(inst, Gauge):
        for key, value in inst.observe():
            out.append(f"{name}{_labels(names, key)} {_number(value)}")


def render(registry: Registry) -> bytes:
    out: list[str] = []
    for inst in registry.instruments:
        _family(inst, out)
    out.append("")
    return "\n".join(out).encode()
