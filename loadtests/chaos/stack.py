"""The processes a chaos run needs: Redis (embedded unless given), one simulated backend,
and gateway replicas run as ``triage serve`` runs them, with a client key configured."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gateway.server.embedded import EmbeddedRedis, free_port
from gateway.settings import hash_key
from loadtests import stack
from loadtests.chaos.checks import Target

KEY = "sk-chaos"
MODEL = "sim-model"
MAX_BODY_BYTES = 256 * 1024
# short deadlines, so slow clients are cut off quickly; not too short: on a loaded machine
# the event loop can stall for a second (see docs/benchmarks/reliability.md)
HEAD_S = 3.0
BODY_S = 3.0


def replica_config(redis_url: str, prefix: str, sim_url: str, slots: int, port: int) -> dict[str, Any]:
    return {
        "host": "127.0.0.1", "port": port, "redis_url": redis_url, "key_prefix": prefix,
        "backends": [{"name": "sim", "url": sim_url, "models": [MODEL], "max_concurrency": slots,
                      "adaptive": False}],
        "api_keys": [{"sha256": hash_key(KEY), "tenant": "chaos"}],
        "max_body_bytes": MAX_BODY_BYTES, "header_timeout_s": HEAD_S, "body_timeout_s": BODY_S,
    }


@contextlib.contextmanager
def chaos_stack(workdir: Path, replicas: int = 2, slots: int = 4, redis_url: str | None = None,
                tracemalloc_every_s: float | None = None) -> Iterator[tuple[list[Target], list[stack.Child]]]:
    """Start everything; yield one ``Target`` per replica and the replicas' processes."""
    with contextlib.ExitStack() as stop:
        if redis_url is None:
            server = EmbeddedRedis()
            redis_url = server.start()
            stop.callback(server.stop)
        sim = stack.simulator(stack.SimSpec(profile="fast", model=MODEL, max_num_seqs=64), 0, workdir)
        stop.callback(sim.stop)
        sim_url = sim.start("/health")
        prefix = f"chaos{uuid.uuid4().hex[:8]}"
        targets, children = [], []
        for i in range(replicas):
            port = free_port()
            config = replica_config(redis_url, prefix, sim_url, slots, port)
            if tracemalloc_every_s is None or i > 0:  # traced: the first replica; the other runs plain
                child = stack.gateway(config, f"replica-{i}", workdir)
            else:
                path = workdir / f"replica-{i}.yaml"
                import yaml

                path.write_text(yaml.safe_dump(config), encoding="utf-8")
                cmd = [sys.executable, "-m", "loadtests.chaos.replica", str(path),
                       str(workdir / f"replica-{i}.tracemalloc.jsonl"), str(tracemalloc_every_s)]
                child = stack.Child(f"replica {i}", cmd, f"http://127.0.0.1:{port}", workdir / f"replica-{i}.log")
            stop.callback(child.stop)
            child.start("/ready", timeout_s=60)
            children.append(child)
            targets.append(Target("127.0.0.1", port, redis_url, prefix, sim_url, KEY, MODEL))
        yield targets, children
