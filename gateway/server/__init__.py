"""The gateway process: connections, drain, reload, Redis clients, children (docs/architecture.md)."""
