"""Backend control: what each backend is, may take and is doing now (docs/architecture.md)."""
