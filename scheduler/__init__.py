"""Deciding who goes next and where: no HTTP, no knowledge of the gateway (docs/architecture.md)."""
