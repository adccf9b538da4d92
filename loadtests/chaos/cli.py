"""``triage bench chaos``: fuzz, disconnect storm, slow clients and soak against two
replicas of a gateway with keys configured, in front of one simulated backend; the
criteria are checked after each phase and the figures written as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from loadtests.chaos import fuzz
from loadtests.chaos.checks import Target, normal_request, settle
from loadtests.chaos.slow import slow_clients
from loadtests.chaos.soak import soak
from loadtests.chaos.stack import MAX_BODY_BYTES, chaos_stack
from loadtests.chaos.storm import storm


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fuzz-cases", type=int, default=20_000)
    p.add_argument("--storm-clients", type=int, default=1000)
    p.add_argument("--slow-clients", type=int, default=200)
    p.add_argument("--soak-s", type=float, default=600.0, help="soak duration (0: no soak)")
    p.add_argument("--rate", type=float, default=20.0, help="soak requests per second, all replicas")
    p.add_argument("--slots", type=int, default=4, help="the backend's concurrency limit")
    p.add_argument("--tracemalloc-every-s", type=float, default=None,
                   help="run the first replica under tracemalloc, a snapshot diff this often")
    p.add_argument("--redis-url", default=None, help="default: an embedded Valkey")
    p.add_argument("--out", type=Path, default=Path("chaos-results.json"))


async def _phases(args: argparse.Namespace, targets: list[Target], pids: list[int]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    first = targets[-1]  # fuzz, storm and slow clients go to the replica not under tracemalloc
    items = fuzz.cases(args.seed, args.fuzz_cases, first.model, first.key, MAX_BODY_BYTES)
    res = await fuzz.run(first.host, first.port, items)
    left, settle_s = await settle(first)
    report["fuzz"] = {
        "cases": res.cases, "statuses": {str(k): v for k, v in sorted(res.statuses.items(), key=str)},
        "by_category": {c: {str(k): v for k, v in n.items()} for c, n in res.by_category.items()},
        "server_errors": len(res.server_errors), "own_deadline_504": res.own_deadline, "not_openai": len(res.not_openai),
        "no_answer": len(res.no_answer), "slowest_s": round(res.slowest_s, 2), "failures": res.failures(),
        "leftovers_clean": left.clean, "normal_after": await normal_request(first),
    }
    print("fuzz:", json.dumps({k: v for k, v in report["fuzz"].items() if k != "by_category"}), flush=True)
    st = await storm(first, args.storm_clients, args.seed)
    report["storm"] = {
        "clients": st.clients, "plans": dict(st.plans), "statuses_of_readers": {str(k): v for k, v in
                                                                              st.statuses.items()},
        "server_errors": st.server_errors, "leftovers_clean": bool(st.leftovers and st.leftovers.clean),
        "settle_s": round(st.settle_s, 2), "normal_after": await normal_request(first),
    }
    print("storm:", json.dumps(report["storm"]), flush=True)
    sl = await slow_clients(first, args.slow_clients)
    report["slow"] = {"clients": sl.clients, "cut_off": sl.summary(),
                      "statuses": {k: {str(s): n for s, n in v.items()} for k, v in sl.statuses.items()},
                      "health_during": sl.health_during, "normal_during": sl.normal_during}
    print("slow:", json.dumps(report["slow"]), flush=True)
    if args.soak_s > 0:
        so = await soak(targets, pids, args.soak_s, args.rate, args.seed)
        left, _ = await settle(first)
        report["soak"] = {"duration_s": so.duration_s, "rate": so.rate, "sent": so.sent, "sent_s": round(so.sent_s, 1), "ok": so.ok,
                          "failed": so.failed, "replicas": list(so.growth().values()),
                          "samples": {str(p): [[s.t_s, s.rss_mb, s.fds] for s in v] for p, v in so.samples.items()},
                          "leftovers_clean": left.clean}
        print("soak:", json.dumps({k: v for k, v in report["soak"].items() if k != "samples"}), flush=True)
    return report


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="triage-chaos-") as tmp:
        workdir = Path(tmp)
        with chaos_stack(workdir, 2, args.slots, args.redis_url, args.tracemalloc_every_s) as (targets, children):
            pids = [c.pid for c in children if c.pid is not None]
            report = asyncio.run(_phases(args, targets, pids))
        for path in sorted(workdir.glob("*.tracemalloc.jsonl")):
            lines = path.read_text(encoding="utf-8").splitlines()
            report.setdefault("tracemalloc", {})[path.stem] = [json.loads(line) for line in lines]
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"written: {args.out}")
    bad = report["fuzz"]["server_errors"] + report["fuzz"]["no_answer"] + report["storm"]["server_errors"]
    return 1 if bad else 0
