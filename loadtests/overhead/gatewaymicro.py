"""Instructions per request of the whole gateway, counted by valgrind, two trees side by side.

``python -m loadtests.overhead.gatewaymicro --before DIR`` starts a Valkey and the instant
simulator, then, for this tree and for ``DIR`` (another checkout, e.g. a ``git worktree``)
in turn, a gateway (``triage serve``, one worker) under valgrind's callgrind with its counting
off. After ``--warmup`` requests it counts the instructions of ``--requests`` requests sent one
after another (non-streamed, or ``--stream``), then those of the same time with nothing sent
(what the gateway does anyway, its timers slowed to once a minute: ``QUIET``), and reports
their difference per request.

CPU time per request (``bench overhead``) moves by 10-20% between runs of one tree on a
shared two-core machine: more than most single changes to the request path. The same code
run as two trees counts the same in one round to 0.1%, so a change of a fraction of a
percent can be read (rounds differ among themselves by up to 6%:
compare within a round); it weighs every instruction alike (a cache miss or a system
call's time in the kernel is not in it), so it says what a change does to the work, and
``bench overhead`` what the work costs. Under callgrind a request takes about fifty times
as long: the defaults take about two minutes per tree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from loadtests.overhead.predictormicro import instructions
from loadtests.overhead.steps import Workload
from loadtests.overhead.targets import Child, start_simulator, start_triage, start_valkey

# The gateway's own timers (heartbeats, probes, key and stats syncs, the predictor's sharing)
# slowed to once a minute or more: what it does with nothing to serve is then small and even,
# so what is left after the idle rate is taken off is the requests' own work.
QUIET = {"heartbeat_s": 60.0, "lease_ttl_s": 600.0, "probe_interval_s": 60.0, "key_sync_s": 60.0,
         "stats_publish_s": 60.0, "predictor_sync_s": 60.0, "reload_check_s": 0.0}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Counted:
    """Instructions counted while ``requests`` were served in ``busy_s``, and over ``idle_s`` of nothing."""

    requests: int
    busy: int
    busy_s: float
    idle: int
    idle_s: float

    def per_request(self) -> int:
        """The busy count less what the idle rate accounts for in the same time, per request."""
        background = self.idle / self.idle_s * self.busy_s if self.idle_s > 0 else 0.0
        return round((self.busy - background) / self.requests)


def _control(valgrind_pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(valgrind_pid)], check=True, capture_output=True, timeout=120)


def _dumped(out: Path, number: int) -> int:
    """The count of the ``number``-th dump (callgrind writes ``<out>.<number>``; a dump zeroes the counters)."""
    return instructions(Path(f"{out}.{number}").read_text())


def count(child: Child, url: str, out: Path, bodies: list[str], warmup: int, requests: int, idle_s: float) -> Counted:
    """Send ``warmup`` requests uncounted, then count ``requests``, then ``idle_s`` of nothing;
    the bodies in turn, from the first again for the counted ones."""
    headers = {"content-type": "application/json"}
    with httpx.Client(timeout=300, trust_env=False) as http:

        def send(n: int) -> None:
            for i in range(n):
                body = bodies[i % len(bodies)]
                reply = http.post(f"{url}/v1/chat/completions", content=body, headers=headers)
                reply.raise_for_status()
                reply.read()

        send(warmup)
        _control(child.pid, "-i", "on")
        start = time.monotonic()
        send(requests)
        busy_s = time.monotonic() - start
        _control(child.pid, "-i", "off")
        _control(child.pid, "-d")
        _control(child.pid, "-i", "on")
        start = time.monotonic()
        time.sleep(idle_s)  # a benchmark's measured interval, not a wait for an event
        idle_span = time.monotonic() - start
        _control(child.pid, "-i", "off")
        _control(child.pid, "-d")
    return Counted(requests, _dumped(out, 1), busy_s, _dumped(out, 2), idle_span)


def read_bodies(workload: Workload, args: argparse.Namespace) -> list[str]:
    """One request body per row of ``args.prompts`` (its ``prompt`` as the user's message), up to ``--requests``."""
    bodies = []
    with args.prompts.open(encoding="utf-8") as rows:
        for _, row in zip(range(args.requests), rows, strict=False):
            bodies.append(replace(workload, prompt=json.loads(row)["prompt"]).body(args.stream))
    return bodies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.overhead.gatewaymicro", description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout, measured beside this one")
    parser.add_argument("--policy", choices=("fifo", "short_first"), default="short_first")
    parser.add_argument("--requests", type=int, default=100, help="requests counted per tree")
    parser.add_argument("--warmup", type=int, default=30, help="requests sent first, not counted")
    parser.add_argument("--idle-s", type=float, default=10.0, help="seconds of nothing counted, for the background")
    parser.add_argument("--repeats", type=int, default=1, help="rounds, each tree once per round, alternating")
    parser.add_argument("--stream", action="store_true", help="streamed requests (default: non-streamed)")
    parser.add_argument("--prompts", type=Path, metavar="JSONL",
                        help="real prompts instead of the one short prompt: each row's 'prompt', the first "
                             "--requests of them, the same ones for both trees (e.g. ShareGPT's first turns)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    valgrind = shutil.which("valgrind")
    if valgrind is None or shutil.which("callgrind_control") is None:
        print("valgrind and callgrind_control are needed (Debian's package valgrind)", file=sys.stderr)
        return 2
    # one hash seed for every process it starts: string hashes order sets and dicts, and with
    # them how much work some steps do; with a seed of its own per process, two runs of one
    # tree differed by up to 7%, with one seed by 0.1%
    os.environ["PYTHONHASHSEED"] = "0"
    trees: dict[str, Path | None] = {"this": None} | ({"before": args.before.resolve()} if args.before else {})
    workload = Workload()
    bodies = [workload.body(args.stream)] if args.prompts is None else read_bodies(workload, args)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="gatewaymicro-") as tmp:
        workdir = Path(tmp)
        sim, sim_url = start_simulator(workload.model, workdir, [])
        valkey, redis_url = start_valkey("gatewaymicro", workdir)
        try:
            for repeat in range(args.repeats):
                for name, tree in trees.items():
                    out = workdir / f"callgrind-{name}-{repeat}.out"
                    wrap = (valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}")
                    target = start_triage(args.policy, redis_url, sim_url, workload.model, workdir, tree=tree, wrap=wrap,
                                          ready_s=600, settings=QUIET)  # fmt: skip
                    assert target.child is not None
                    try:
                        counted = count(target.child, target.url, out, bodies, args.warmup, args.requests, args.idle_s)
                    finally:
                        target.child.stop()
                    results[name].append({"per_request": counted.per_request(), "busy": counted.busy,
                                          "busy_s": counted.busy_s, "idle": counted.idle, "idle_s": counted.idle_s})
                    print(f"{name:>6} round {repeat + 1}: {counted.per_request():,} instructions a request "
                          f"({counted.requests} in {counted.busy_s:.1f} s; idle {counted.idle / counted.idle_s:,.0f}/s)",
                          flush=True)  # fmt: skip
        finally:
            valkey.stop()
            sim.stop()
    if args.before:
        ratios = [a["per_request"] / b["per_request"] for a, b in zip(results["this"], results["before"], strict=True)]
        print("this ÷ before: " + " / ".join(f"{r:.3f}" for r in ratios))
    if args.json:
        doc = {"policy": args.policy, "stream": args.stream, "prompts": str(args.prompts) if args.prompts else None,
               "results": results}  # fmt: skip
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
