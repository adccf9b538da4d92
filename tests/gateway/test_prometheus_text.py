"""``/metrics`` text: every sample belongs to a family with ``# HELP`` and ``# TYPE`` lines
of its own name (what ``promtool check metrics`` asks); counters end in ``_total``."""

from __future__ import annotations

from gateway.telemetry.instruments import Registry
from gateway.telemetry.prometheus import render


def families(text: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    helps, types, samples = {}, {}, []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, doc = line[7:].partition(" ")
            helps[name] = doc
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            types[name] = kind
        elif line:
            samples.append(line.split("{")[0].split(" ")[0])
    return helps, types, samples


def family_of(sample: str, types: dict[str, str]) -> str:
    if sample in types:
        return sample
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample.removesuffix(suffix)
        if base != sample and types.get(base) == "histogram":
            return base
    raise AssertionError(f"sample {sample} has no family")


def test_every_sample_has_help_and_type_of_its_family() -> None:
    r = Registry()
    r.counter("triage.requests", "{request}", "Requests answered.", ("triage.outcome",)).add(2, ("ok",))
    r.counter("triage.pauses_total", "{pause}", "Already suffixed.").add(1)
    r.counter("triage.output_tokens", "{token}", "Output tokens.").add(7)
    r.histogram("triage.queue.wait", "s", "Queue wait.", (), (0.5, 1.0)).record(0.7)
    r.gauge("triage.queue.depth", "{request}", "Queued.", (), lambda: [((), 3)])
    helps, types, samples = families(render(r).decode())

    assert types == {
        "triage_requests_total": "counter", "triage_pauses_total": "counter",
        "triage_output_tokens_total": "counter", "triage_queue_wait_seconds": "histogram",
        "triage_queue_depth": "gauge",
    }
    assert helps.keys() == types.keys()
    for sample in samples:
        assert family_of(sample, types) in helps
    text = render(r).decode()
    assert 'triage_requests_total{triage_outcome="ok"} 2' in text
    assert "triage_pauses_total 1" in text and "triage_pauses_total_total" not in text
