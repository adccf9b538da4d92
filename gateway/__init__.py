"""The gateway: OpenAI-compatible HTTP in front of the scheduler (map: docs/architecture.md)."""
