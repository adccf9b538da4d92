"""The generator's own process: ``python -m loadtests.overhead.worker SPEC.json OUT.json``.

It runs apart from the process that starts targets and reads counters, on uvloop,
optionally pinned to CPUs (``"cpus": [0]`` in the spec), so the orchestration does not
steal its event loop. The spec is ``{"kind": "openloop" | "relay", "cpus": [...],
"spec": {...}}`` with the request body as text; the output is the summary as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from loadtests.overhead.openloop import LoadSpec, run_openloop
from loadtests.overhead.relaytest import RelaySpec, run_relay


async def _main(doc: dict[str, Any]) -> dict[str, Any]:
    spec = dict(doc["spec"])
    spec["body"] = spec["body"].encode("utf-8")
    if doc["kind"] == "openloop":
        return await run_openloop(LoadSpec(**spec))
    if doc["kind"] == "relay":
        return await run_relay(RelaySpec(**spec))
    raise ValueError(f"unknown kind {doc['kind']!r}")


def main(argv: list[str]) -> int:
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    doc = json.loads(spec_path.read_text(encoding="utf-8"))
    if doc.get("cpus"):
        os.sched_setaffinity(0, set(doc["cpus"]))
    try:
        import uvloop
    except ImportError:  # plain asyncio works too, at a higher cost per chunk
        result = asyncio.run(_main(doc))
    else:
        result = uvloop.run(_main(doc))
    out_path.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
