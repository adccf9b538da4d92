"""CPU seconds a process and its descendants have used, from ``/proc/<pid>/stat``.

Fields 14 and 15 (utime, stime) are in clock ticks; the command name (field 2) may
hold spaces and parentheses, so the fields are counted from its closing parenthesis.
Descendants are found through ``/proc/<pid>/task/<tid>/children``. A process that
has gone counts as zero from then on. Linux only.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` alone, in seconds; 0.0 if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 and 15 of the whole line


def descendants(pid: int, limit: int = 256) -> list[int]:
    """Child PIDs of ``pid``, their children, and so on (at most ``limit``)."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < limit:
        current = todo.pop()
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found[:limit]


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and every descendant it has now."""
    return cpu_seconds(pid) + sum(cpu_seconds(p) for p in descendants(pid))


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return text[text.rindex(")") + 2:].split()[0] != "Z"
