"""Decisions as small pure functions, apart from the mechanism that applies them (docs/architecture.md)."""
