"""One inference request's way through the gateway, to its last byte (docs/architecture.md)."""
