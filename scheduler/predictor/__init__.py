"""Output-length prediction, as it runs in the gateway (docs/architecture.md)."""
