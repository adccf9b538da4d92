"""LiteLLM for the side-by-side: a pinned version in a cache directory of its own.

``triage bench overhead --litellm`` installs ``litellm[proxy]==LITELLM_VERSION`` into
``<cache>/triage/litellm-<version>`` on first use (``$XDG_CACHE_HOME``, else
``~/.cache``) and reuses it afterwards; ``--litellm-venv`` points at another one.
Without ``--litellm`` an existing install is used and a missing one leaves LiteLLM out,
saying how to get it. Every way it is left out is reported, never silent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LITELLM_VERSION = "1.106.12"  # the newest whose [proxy] extra installs from the index here (1.107+ split it out)
INSTALL_TIMEOUT_S = 900.0


class InstallFailed(Exception):
    """LiteLLM could not be installed; ``str()`` says why (pip's last lines)."""


def default_venv() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "triage" / f"litellm-{LITELLM_VERSION}"


def installed(venv: Path) -> bool:
    return (venv / "bin" / "litellm").exists()


def install(venv: Path, log: Path, python: str = sys.executable) -> None:
    """Create ``venv`` and install the pinned LiteLLM proxy into it; pip's output goes to
    ``log``. Raises ``InstallFailed`` with the reason."""
    log.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [python, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"],
    ]
    with log.open("ab") as out:
        for cmd in steps:
            try:
                done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      timeout=INSTALL_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired:
                raise InstallFailed(f"{' '.join(cmd[:4])} ran past {INSTALL_TIMEOUT_S:.0f} s; see {log}") from None
            if done.returncode != 0:
                tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
                raise InstallFailed(f"{' '.join(cmd[:4])} exited {done.returncode}: {' | '.join(tail)}")
    if not installed(venv):
        raise InstallFailed(f"pip finished but {venv}/bin/litellm is missing")
