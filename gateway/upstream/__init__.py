"""The boundary to the backends: the one place the gateway calls them (docs/architecture.md)."""
