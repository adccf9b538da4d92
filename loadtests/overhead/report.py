"""The run's numbers as JSON (``--json``) and as Markdown tables.

"Added" is the target's percentile minus ``direct``'s at the same percentile, offered
rate and mode, measured in the same run. A step with no successful request has no
percentiles (``null``).
"""

from __future__ import annotations

import math
from typing import Any

TARGET_ORDER = ("direct", "fifo", "baseline", "short_first", "litellm")


def _num(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def _pct(step: dict[str, Any], metric: str, q: str) -> float | None:
    return _num(step.get(metric, {}).get(q))


def _added(step: dict[str, Any], base: dict[str, Any] | None, metric: str, q: str) -> float | None:
    a, b = _pct(step, metric, q), (_pct(base, metric, q) if base else None)
    return None if a is None or b is None else a - b


def entry(step: dict[str, Any], base: dict[str, Any] | None) -> dict[str, Any]:
    """One target at one rate, in the shape of ``--json``'s ``rates`` list."""
    lateness = step.get("lateness_ms", {})
    return {
        "rps": step.get("rps"),
        "target": step.get("target"),
        "stream": step.get("stream"),
        "added_ttft_p50_ms": _added(step, base, "ttft_ms", "p50"),
        "added_ttft_p99_ms": _added(step, base, "ttft_ms", "p99"),
        "added_e2e_p50_ms": _added(step, base, "e2e_ms", "p50"),
        "added_e2e_p99_ms": _added(step, base, "e2e_ms", "p99"),
        "added_itl_p99_ms": _added(step, base, "itl_ms", "p99"),
        "errors": step.get("errors", step.get("requests", 0)) if "worker_error" not in step else None,
        "error_kinds": step.get("error_kinds", {}),
        "cpu_ms_per_request": _num(step.get("cpu_ms_per_request")),
        "redis_commands_per_request": _num(step.get("redis_commands_per_request")),
        "redis_calls": step.get("redis_calls", {}),
        "achieved_rps": _num(step.get("achieved_rps")),
        "send_rps": _num(step.get("send_rps")),
        "requests": step.get("requests"),
        "tokens_mean": _num(step.get("tokens_mean")),
        "ttft_p50_ms": _pct(step, "ttft_ms", "p50"),
        "ttft_p99_ms": _pct(step, "ttft_ms", "p99"),
        "e2e_p50_ms": _pct(step, "e2e_ms", "p50"),
        "e2e_p99_ms": _pct(step, "e2e_ms", "p99"),
        "generator_lateness_p50_ms": _num(lateness.get("p50")),
        "generator_lateness_p99_ms": _num(lateness.get("p99")),
        "generator_cpu_pct": _num(step.get("generator_cpu_pct")),
        "worker_error": step.get("worker_error"),
    }


def entries(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    bases = {(s["rps"], s.get("stream")): s for s in steps if s.get("target") == "direct"}
    order = {name: i for i, name in enumerate(TARGET_ORDER)}
    ordered = sorted(steps, key=lambda s: (s["rps"], order.get(s["target"], 99)))
    return [entry(s, bases.get((s["rps"], s.get("stream")))) for s in ordered]


SUSTAINED = 0.95  # achieved ÷ offered, with no error: a rate the target kept up with
TRIAGE = ("fifo", "short_first")


def sustained(e: dict[str, Any]) -> bool:
    achieved = e["achieved_rps"]
    return e["errors"] == 0 and achieved is not None and achieved >= SUSTAINED * e["rps"]


def against(rows: list[dict[str, Any]], other: str = "litellm") -> list[dict[str, Any]]:
    """Each Triage target's added TTFT p50 beside ``other``'s at each rate both ran, as
    ``other`` ÷ Triage; compared only where both sustained the rate (no error, at least
    95% of it achieved), else ``why_not`` says which did not."""
    by_rate: dict[float, dict[str, dict[str, Any]]] = {}
    for e in rows:
        by_rate.setdefault(e["rps"], {})[e["target"]] = e
    out: list[dict[str, Any]] = []
    for rps, targets in sorted(by_rate.items()):
        theirs = targets.get(other)
        if theirs is None:
            continue
        for name in TRIAGE:
            ours = targets.get(name)
            if ours is None:
                continue
            ours_ms, theirs_ms = ours["added_ttft_p50_ms"], theirs["added_ttft_p50_ms"]
            row = {"rps": rps, "target": name, "other": other, "added_ttft_p50_ms": ours_ms,
                   "other_added_ttft_p50_ms": theirs_ms, "ratio": None, "why_not": None}
            short = [t["target"] for t in (ours, theirs) if not sustained(t)]
            if short:
                row["why_not"] = f"{' and '.join(short)} did not sustain {rps:.0f} RPS"
            elif ours_ms is None or theirs_ms is None or ours_ms <= 0:
                row["why_not"] = "no positive added TTFT to divide by"
            else:
                row["ratio"] = theirs_ms / ours_ms
            out.append(row)
    return out


def build(stream_steps: list[dict[str, Any]], plain_steps: list[dict[str, Any]],
          relay: dict[str, Any] | None, roundtrips: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    rates, plain = entries(stream_steps), entries(plain_steps)
    triage = [r["roundtrips_per_request"] for r in roundtrips]
    return {
        "rates": rates,
        "nonstream_rates": plain,
        "relay_chunks_per_s": relay.get("relay_chunks_per_s") if relay else None,
        "relay": relay,
        # client-sent commands per request (MONITOR sample), the higher of the Triage targets
        "redis_roundtrips_per_request": max(triage) if triage else None,
        "redis_roundtrips": roundtrips,
        "against_litellm": {"stream": against(rates), "nonstream": against(plain)},
        "meta": meta,
    }


def _f(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown_rates(rows: list[dict[str, Any]], title: str) -> str:
    head = ("| RPS | target | added TTFT p50 | added TTFT p99 | added E2E p50 | added E2E p99 | errors | "
            "gateway CPU ms/req | Redis cmds/req | achieved RPS | TTFT p50 / p99 | gen. lateness p99 | gen. CPU |")
    lines = [f"**{title}** (ms unless noted)", "", head, "|" + "---:|" * 2 + "---:|" * 11]
    for e in rows:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(e["error_kinds"].items()))
        errors = f"{e['errors']}" + (f" ({kinds})" if kinds else "") if e["errors"] is not None else "–"
        if e.get("worker_error"):
            errors = e["worker_error"]
        lines.append(
            f"| {e['rps']:.0f} | {e['target']} | {_f(e['added_ttft_p50_ms'])} | {_f(e['added_ttft_p99_ms'])} | "
            f"{_f(e['added_e2e_p50_ms'])} | {_f(e['added_e2e_p99_ms'])} | {errors} | "
            f"{_f(e['cpu_ms_per_request'])} | {_f(e['redis_commands_per_request'], 1)} | "
            f"{_f(e['achieved_rps'], 0)} | {_f(e['ttft_p50_ms'])} / {_f(e['ttft_p99_ms'])} | "
            f"{_f(e['generator_lateness_p99_ms'])} | {_f(e['generator_cpu_pct'], 0)} % |")
    return "\n".join(lines)


def markdown_relay(relay: dict[str, Any]) -> str:
    lines = [f"**Relay** through `{relay['target']}`: streams of {relay['max_tokens']} tokens, "
             f"best within +{relay['bound_ms']:.0f} ms ITL p99: **{relay['relay_chunks_per_s']:.0f} chunks/s**", "",
             "| streams | direct chunks/s | gateway chunks/s | direct ITL p99 | gateway ITL p99 | added | "
             "gateway CPU µs/chunk | within |", "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for r in relay["levels"]:
        lines.append(
            f"| {r['concurrency']} | {_f(r['direct_chunks_per_s'], 0)} | {_f(r['chunks_per_s'], 0)} | "
            f"{_f(r['direct_itl_p99_ms'])} | {_f(r['itl_p99_ms'])} | {_f(_num(r['added_itl_p99_ms']))} | "
            f"{_f(r['gateway_cpu_us_per_chunk'], 1)} | {'yes' if r['within_bound'] else 'no'} |")
    return "\n".join(lines)


def markdown_roundtrips(rows: list[dict[str, Any]]) -> str:
    lines = ["**Redis round trips** (MONITOR sample: commands sent by the gateway, per request)", "",
             "| target | RPS | requests | sent per request | run inside scripts per request | sent, by command |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        by = ", ".join(f"{k} {v / max(1, r['requests']):.2f}" for k, v in r["commands"].items())
        lines.append(f"| {r['target']} | {r['rps']:.0f} | {r['requests']} | {_f(r['roundtrips_per_request'])} | "
                     f"{_f(r['script_commands_per_request'], 1)} | {by} |")
    return "\n".join(lines)


def markdown_against(rows: list[dict[str, Any]], mode: str) -> list[str]:
    lines = []
    for r in rows:
        if r["ratio"] is not None:
            verdict = f"**{r['ratio']:.1f}×** lower ({_f(r['added_ttft_p50_ms'])} against {_f(r['other_added_ttft_p50_ms'])} ms)"
        else:
            verdict = f"not compared: {r['why_not']}"
        lines.append(f"- {mode}, {r['rps']:.0f} RPS, {r['target']}: {verdict}")
    return lines


def markdown(doc: dict[str, Any]) -> str:
    parts = [markdown_rates(doc["rates"], "Streaming, 50 output tokens")]
    if doc.get("redis_roundtrips"):
        parts.append(markdown_roundtrips(doc["redis_roundtrips"]))
    if doc["nonstream_rates"]:
        parts.append(markdown_rates(doc["nonstream_rates"], "Non-streaming (TTFT = first body byte)"))
    if doc.get("relay"):
        parts.append(markdown_relay(doc["relay"]))
    vs = doc.get("against_litellm") or {}
    lines = markdown_against(vs.get("stream", []), "streamed") + markdown_against(vs.get("nonstream", []), "non-streamed")
    if lines:
        parts.append("\n".join(["**Against LiteLLM**: added TTFT p50, LiteLLM's ÷ Triage's, where both sustained "
                                 "the rate (no error, ≥ 95% of it achieved)", "", *lines]))
    return "\n\n".join(parts) + "\n"


def sanitize(value: Any) -> Any:
    """NaN and infinity become null, so the JSON is strict."""
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    return value
