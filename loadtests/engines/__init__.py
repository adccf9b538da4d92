"""Real inference engines on loopback, for tests and benchmarks (docs/engines.md)."""
