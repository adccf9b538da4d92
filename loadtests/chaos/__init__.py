"""``triage bench chaos``: a hostile client's view of the gateway (docs/benchmarks/reliability.md)."""
