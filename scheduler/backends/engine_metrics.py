"""Read an inference engine's load from its Prometheus ``/metrics`` text.

Only gauges that say how busy the engine is: requests running, requests waiting in
its own queue, and KV-cache usage. Which names those are is the engine profile's
business (``engines.py``); a sample with several label sets (several models) is
summed, usage takes the maximum.
"""

from __future__ import annotations

from scheduler.backends.engines import NEUTRAL, EngineProfile
from scheduler.policy.limits import EngineLoad


def parse(text: str, profile: EngineProfile = NEUTRAL) -> EngineLoad:
    wanted = profile.names()
    kv_names = set(profile.kv_usage)
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
        if name_end < 0:
            continue
        name = line[:name_end]
        if name not in wanted:
            continue
        rest = line[name_end:]
        if rest.startswith("{"):
            rest = rest.rsplit("}", 1)[-1]
        try:
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            continue
        if name in kv_names:
            sums[name] = max(sums.get(name, 0.0), value)
        else:
            sums[name] = sums.get(name, 0.0) + value
    return EngineLoad(
        running=_first(sums, profile.running), waiting=_first(sums, profile.waiting),
        kv_usage=_first(sums, profile.kv_usage),
    )


def _first(sums: dict[str, float], names: tuple[str, ...]) -> float | None:
    for name in names:
        if name in sums:
            return sums[name]
    return None
