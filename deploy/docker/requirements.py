"""Print the requirements of pyproject.toml, one a line: the base dependencies and those
of the extras named on the command line (``python requirements.py bench``).

The Dockerfile installs these in a layer of their own, before any code is copied, so
an edit to the code reuses the installed dependencies; only an edit to
pyproject.toml installs them again.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"requirements.py: no such extra: {', '.join(unknown)}")
    return [*project["dependencies"], *(r for e in extras for r in optional[e])]


if __name__ == "__main__":
    print("\n".join(requirements(Path("pyproject.toml"), sys.argv[1:])))
