"""The HTTP surface: routes, keys, the admin endpoints (docs/architecture.md)."""
