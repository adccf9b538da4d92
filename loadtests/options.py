"""What every load tool's command line shares: its usage error and where the data lives."""

from __future__ import annotations

import os
from pathlib import Path


class UsageError(Exception):
    """A flag problem, as one line."""


def default_data_dir() -> Path:
    """``../shared/data`` beside the repository (where the project keeps its datasets)."""
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def resolve_data_dir(flag: str | None) -> Path | None:
    """The data folder from the flag, else ``TRIAGE_DATA_DIR``, else the default; None if absent."""
    path = Path(flag or os.environ.get("TRIAGE_DATA_DIR") or default_data_dir())
    return path if path.is_dir() else None
