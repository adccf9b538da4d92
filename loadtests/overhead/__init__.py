"""``triage bench overhead``: what the gateway itself costs per request (docs/benchmarks/overhead.md)."""
