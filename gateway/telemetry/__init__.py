"""The gateway's traces, metrics and request log (docs/architecture.md, docs/observability.md)."""
