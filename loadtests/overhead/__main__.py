"""``python -m loadtests.overhead ...``: the same flags as ``triage bench overhead``."""

from __future__ import annotations

import sys

from loadtests.overhead.cli import main

if __name__ == "__main__":
    sys.exit(main())
