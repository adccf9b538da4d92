"""Offline tools for the predictor, never imported by the gateway (docs/architecture.md)."""
