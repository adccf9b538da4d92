"""``triage bench overhead`` (also ``python -m loadtests.overhead``): the flags and the run.

The order of a run: start the simulator and every target; then for each offered rate,
each target in turn (direct, fifo, short_first, litellm, then short_first with
``--workers`` processes), one open-loop step; then
the non-streamed series; then the relay experiment; then stop every child by PID.
All targets stay up for the whole run, so every step sees the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loadtests.overhead import procstat, profiling, report
from loadtests.overhead.litellm_env import LITELLM_VERSION, InstallFailed, default_venv, install, installed
from loadtests.overhead.relay import relay_experiment
from loadtests.overhead.steps import StepPlan, Workload, openloop_step, roundtrip_step
from loadtests.overhead.targets import (
    Child,
    Target,
    TargetError,
    settle,
    start_litellm,
    start_simulator,
    start_triage,
    start_valkey,
)

ALL_TARGETS = ("direct", "fifo", "short_first", "litellm")


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in ALL_TARGETS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown target(s) {unknown}; known: {', '.join(ALL_TARGETS)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``triage bench overhead``."""
    g = parser.add_argument_group("load")
    g.add_argument("--rates", type=_floats, default=[25.0, 100.0, 250.0, 500.0, 1000.0],
                   help="offered requests/s of the streaming series, comma-separated (default 25,100,250,500,1000)")
    g.add_argument("--nonstream-rates", type=_floats, default=[100.0, 500.0],
                   help="offered requests/s of the non-streamed series ('' for none; default 100,500)")
    g.add_argument("--duration", type=float, default=5.0, help="measured seconds per step (default 5)")
    g.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each step (default 1)")
    g.add_argument("--drain", type=float, default=10.0,
                   help="seconds a step waits for its last requests before counting them as timeouts")
    g.add_argument("--max-tokens", type=int, default=50, help="output tokens per request (ignore_eos; default 50)")
    g.add_argument("--max-connections", type=int, default=4000, help="client connections per step, at most")
    g.add_argument("--generator-cpus", type=_ints, default=[],
                   help="pin the load generator to these CPUs, e.g. 0 (default: not pinned)")
    g.add_argument("--gateway-cpus", type=_ints, default=[],
                   help="pin each gateway (and LiteLLM) to these CPUs and the simulator and Valkey to the "
                        "others, e.g. 1: a gateway alone on its core is never preempted by what it wakes, "
                        "so a profile shows its CPU, not its waits (default: not pinned)")
    t = parser.add_argument_group("targets")
    t.add_argument("--targets", type=_names, default=list(ALL_TARGETS),
                   help="comma-separated, from direct,fifo,short_first,litellm (default all)")
    t.add_argument("--workers", type=_ints, default=[],
                   help="also short_first with N worker processes (triage serve --workers N), e.g. 2; "
                        "named short_first_wN (default none)")
    t.add_argument("--litellm", action="store_true",
                   help=f"install LiteLLM {LITELLM_VERSION} into its cache virtualenv when it is missing "
                        "(without this flag a missing LiteLLM is left out, and the run says so)")
    t.add_argument("--litellm-venv", type=Path, default=None,
                   help=f"virtualenv holding litellm[proxy] (default {default_venv()})")
    t.add_argument("--baseline", type=Path, default=None,
                   help="also short_first from this source tree (e.g. a git worktree of an earlier commit), "
                        "named baseline: a before/after in one run")
    t.add_argument("--redis-url", default=None,
                   help="a Redis both gateways share (default: one embedded Valkey per gateway)")
    g.add_argument("--roundtrip-rate", type=float, default=100.0,
                   help="offered requests/s of the MONITOR sample counting Redis round trips (default 100)")
    g.add_argument("--roundtrip-duration", type=float, default=2.0, help="seconds of that sample (default 2)")
    r = parser.add_argument_group("relay throughput")
    r.add_argument("--relay-levels", type=_ints, default=[2, 4, 8, 12, 16, 24],
                   help="concurrent long streams per level ('' to skip; default 2,4,8,12,16,24)")
    r.add_argument("--relay-duration", type=float, default=3.0, help="measured seconds per level (default 3)")
    r.add_argument("--relay-tokens", type=int, default=2000, help="tokens per relay stream (default 2000)")
    p = parser.add_argument_group("profiling")
    p.add_argument("--py-spy", default=None, help="py-spy binary: sample one gateway step with it")
    p.add_argument("--profile-target", default="short_first", help="target to sample (default short_first)")
    p.add_argument("--profile-rate", type=float, default=500.0, help="rate to sample at (default 500)")
    p.add_argument("--profile-plain", action="store_true", help="sample non-streamed requests (default: streamed)")
    o = parser.add_argument_group("output")
    o.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    o.add_argument("--markdown", type=Path, default=None, help="write the tables as Markdown here")
    o.add_argument("--workdir", type=Path, default=None, help="logs and configs (default: a new temp folder)")
    o.add_argument("--smoke", action="store_true",
                   help="a short check: 50 RPS for 2 s, direct and fifo, no non-streamed series, no relay")


def _smoke(args: argparse.Namespace) -> None:
    args.rates, args.nonstream_rates, args.relay_levels = [50.0], [], []
    args.duration, args.warmup, args.drain = 2.0, 0.5, 5.0
    args.roundtrip_rate, args.roundtrip_duration = 50.0, 1.0
    args.targets = [t for t in args.targets if t in ("direct", "fifo")] or ["direct", "fifo"]
    args.py_spy = None


def _log(message: str) -> None:
    print(f"[overhead {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Run:
    """The children of one run, stopped in reverse order of start whatever happens."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.children: list[Child] = []
        self.targets: list[Target] = []
        self.notes: dict[str, Any] = {}
        self.workload = Workload(max_tokens=args.max_tokens)

    def start(self) -> None:
        sim, sim_url = start_simulator(self.workload.model, self.workdir, [])
        self.children.append(sim)
        self.sim_url = sim_url
        self.sim_pid = sim.pid
        self._pin(sim.pid, gateway=False)
        _log(f"simulator (instant) at {sim_url}, pid {sim.pid}")
        for name in self.args.targets:
            if name == "direct":
                self.targets.append(Target("direct", sim_url, None))
            elif name in ("fifo", "short_first"):
                self._start_gateway(name, name)
            elif name == "litellm":
                try:
                    target = start_litellm(self._litellm_venv(), sim_url, self.workload.model, self.workdir)
                except (TargetError, InstallFailed) as exc:
                    self.notes["litellm_error"] = str(exc)
                    _log(f"litellm left out: {exc}")
                    continue
                assert target.child is not None
                self.children.append(target.child)
                self.targets.append(target)
                self._pin(target.child.pid, gateway=True)
                _log(f"litellm at {target.url}, pid {target.child.pid}")

    def _litellm_venv(self) -> Path:
        venv: Path = self.args.litellm_venv or default_venv()
        if installed(venv):
            return venv
        if not self.args.litellm:
            raise TargetError(f"no litellm in {venv}; run with --litellm to install LiteLLM {LITELLM_VERSION} there")
        _log(f"installing LiteLLM {LITELLM_VERSION} into {venv} (once; later runs reuse it)")
        began = time.monotonic()
        install(venv, self.workdir / "litellm-install.log")
        self.notes["litellm_installed_s"] = round(time.monotonic() - began, 1)
        return venv

    def check_litellm(self, rate: float = 5.0, ttft_p50_ms_max: float = 250.0) -> None:
        """Before comparing: LiteLLM must answer a gentle load with every request and its
        usual latency (tens of ms added); otherwise it is left out, with the figures."""
        target = next((t for t in self.targets if t.name == "litellm"), None)
        if target is None:
            return
        a = self.args
        self.settle()
        step = openloop_step(target, StepPlan(rate, 3.0, 3.0, a.drain, True, a.max_connections), self.workload,
                             a.generator_cpus, self.workdir / "litellm-check")
        p50 = (step.get("ttft_ms") or {}).get("p50")
        check = {"rps": rate, "ok": step.get("ok"), "errors": step.get("errors"), "ttft_p50_ms": p50}
        self.notes["litellm_check"] = check
        if step.get("errors") or not step.get("ok") or p50 is None or p50 > ttft_p50_ms_max:
            self.targets.remove(target)
            self.notes["litellm_error"] = f"failed its {rate:g} RPS check: {check}"
            _log(f"litellm left out: failed its {rate:g} RPS check {check}")
        else:
            _log(f"litellm answers at {rate:g} RPS: TTFT p50 {p50:.1f} ms, no errors")

    def _start_gateway(self, policy: str, label: str, workers: int = 1, tree: Path | None = None) -> None:
        """A Triage target (with a Valkey of its own unless ``--redis-url`` is shared)."""
        url = self.args.redis_url
        if not url:
            valkey, url = start_valkey(label, self.workdir)
            self.children.append(valkey)
            self._pin(valkey.pid, gateway=False)
        target = start_triage(policy, url, self.sim_url, self.workload.model, self.workdir, workers=workers, tree=tree)
        assert target.child is not None
        self.children.append(target.child)
        self._pin(target.child.pid, gateway=True)
        self.targets.append(target)
        _log(f"triage {target.name} ({policy}, {workers} worker(s){f', from {tree}' if tree else ''}) "
             f"at {target.url}, pid {target.child.pid}")

    def _pin(self, pid: int, gateway: bool) -> None:
        """``--gateway-cpus``: a gateway's process tree onto those CPUs, anything else off them."""
        cpus = set(self.args.gateway_cpus)
        if not cpus:
            return
        others = os.sched_getaffinity(0) - cpus
        mask = cpus if gateway or not others else others
        for p in (pid, *procstat.descendants(pid)):
            try:
                os.sched_setaffinity(p, mask)
            except OSError:  # gone meanwhile
                pass

    def start_baseline(self) -> None:
        if self.args.baseline is not None:
            self._start_gateway("short_first", "baseline", tree=self.args.baseline)
            self.notes["baseline_tree"] = str(self.args.baseline)

    def start_workers(self) -> None:
        """``short_first`` again with N worker processes on one port: the same config, so the
        rows differ by the worker count alone (one shared Valkey per gateway, as above)."""
        for n in [n for n in self.args.workers if n > 1]:
            self._start_gateway("short_first", f"short_first_w{n}", workers=n)

    def settle(self, timeout_s: float = 30.0) -> float:
        """Wait for the simulator to hold nothing and every child to go quiet (under 5 %
        of a core over 0.5 s): what one step left behind must not load the next."""
        start = time.monotonic()
        settle(self.sim_url, timeout_s)
        for _ in range(int(timeout_s / 0.5)):  # bounded: at most timeout_s more
            before = sum(procstat.tree_cpu_seconds(c.pid) for c in self.children if c.proc is not None)
            time.sleep(0.5)
            after = sum(procstat.tree_cpu_seconds(c.pid) for c in self.children if c.proc is not None)
            if after - before < 0.025:
                break
        return time.monotonic() - start

    def idle_cpu(self, seconds: float = 3.0) -> None:
        """Let startup work finish, and note what each process burns while nobody calls it."""
        before = {c.name: procstat.tree_cpu_seconds(c.pid) for c in self.children}
        time.sleep(seconds)
        idle = {c.name: round(100 * (procstat.tree_cpu_seconds(c.pid) - before[c.name]) / seconds, 1)
                for c in self.children}
        self.notes["idle_cpu_pct"] = idle
        _log(f"idle CPU % over {seconds:.0f} s: {idle}")

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()

    def series(self, rates: list[float], stream: bool) -> list[dict[str, Any]]:
        a = self.args
        steps: list[dict[str, Any]] = []
        for rate in rates:
            for target in self.targets:
                plan = StepPlan(rate, a.duration, a.warmup, a.drain, stream, a.max_connections)
                sub = self.workdir / f"{'stream' if stream else 'plain'}-{rate:g}-{target.name}"
                waited = self.settle()
                if waited > 5:
                    _log(f"waited {waited:.1f} s for the simulator to finish what the last step left")
                step = openloop_step(target, plan, self.workload, a.generator_cpus, sub)
                steps.append(step)
                _log(f"{'stream' if stream else 'plain'} {rate:g} rps {target.name}: "
                     f"ok {step.get('ok')}, errors {step.get('errors')} {step.get('error_kinds', '')}, "
                     f"ttft p50 {step.get('ttft_ms', {}).get('p50', float('nan')):.2f} ms "
                     f"{step.get('worker_error', '')}")
        return steps

    def profile(self) -> dict[str, Any] | None:
        """One extra step at ``--profile-rate`` with py-spy sampling the target; kept out
        of the tables, since the sampler takes CPU from the same two cores."""
        a = self.args
        target = next((t for t in self.targets if t.name == a.profile_target), None)
        if not a.py_spy or target is None or target.child is None:
            return None
        self.settle()
        mode = "plain" if a.profile_plain else "stream"
        out = self.workdir / f"profile-{target.name}-{mode}-{a.profile_rate:g}.txt"
        spy = profiling.start_record(a.py_spy, target.child.pid, a.warmup + a.duration, out)
        plan = StepPlan(a.profile_rate, a.duration, a.warmup, a.drain, not a.profile_plain, a.max_connections)
        step = openloop_step(target, plan, self.workload, a.generator_cpus, self.workdir / "profile-step")
        profiling.finish(spy)
        if not out.exists():
            return {"error": f"py-spy wrote nothing; see {out}.log"}
        summary = _profile_summary(out)
        summary.update(file=str(out), target=target.name, rps=a.profile_rate, stream=not a.profile_plain,
                       step_ok=step.get("ok"), step_errors=step.get("errors"))
        _log(f"profiled {target.name} at {a.profile_rate:g} rps: {summary['samples']} samples in {out}")
        return summary

    def roundtrips(self) -> list[dict[str, Any]]:
        rows = []
        for target in self.targets:
            if target.redis_url and target.name in ("fifo", "short_first", "baseline"):
                row = roundtrip_step(target, self.args.roundtrip_rate, self.args.roundtrip_duration,
                                     self.workload, self.args.generator_cpus,
                                     self.workdir / f"roundtrips-{target.name}")
                _log(f"redis round trips {target.name}: {row['roundtrips_per_request']:.2f} per request "
                     f"({row['script_commands_per_request']:.1f} more inside scripts)")
                rows.append(row)
        return rows

    def relay(self) -> dict[str, Any] | None:
        if not self.args.relay_levels:
            return None
        direct = next((t for t in self.targets if t.name == "direct"), None)
        gateways = sorted((t for t in self.targets if t.name in ("short_first", "fifo")),
                          key=lambda t: t.name != "short_first")
        if direct is None or not gateways:
            return None
        return relay_experiment(direct, gateways[0], self.args.relay_levels, self.args.relay_duration,
                                self.args.relay_tokens, self.workload, self.args.generator_cpus,
                                self.workdir, _log, self.settle)


def _profile_summary(path: Path) -> dict[str, Any]:
    samples, spots = profiling.hot_spots(path)
    areas = profiling.inclusive(path, ["gateway/", "scheduler/", "starlette/", "fastapi/", "httpx/",
                                       "httpcore/", "redis/", "uvicorn/", "orjson", "pydantic", "opentelemetry"])
    return {"samples": samples, "areas_pct": areas,
            "top_self": [{"frame": s.frame, "self_pct": s.self_pct, "total_pct": s.total_pct} for s in spots]}


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; 0 when every step ran (errors are reported, not fatal), 1 otherwise."""
    if args.smoke:
        _smoke(args)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="triage-overhead-"))
    workdir.mkdir(parents=True, exist_ok=True)
    bench = Run(args, workdir)
    started = time.time()
    try:
        bench.start()
        bench.start_baseline()
        bench.start_workers()
        bench.idle_cpu(1.0 if args.smoke else 3.0)
        bench.check_litellm()
        stream_steps = bench.series(args.rates, True)
        roundtrips = bench.roundtrips()
        plain_steps = bench.series(args.nonstream_rates, False)
        relay = bench.relay()
        profile = bench.profile()
    except TargetError as exc:
        _log(str(exc))
        return 1
    finally:
        pids = [c.proc.pid for c in bench.children if c.proc is not None]
        bench.stop()
    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started, 1), "workdir": str(workdir), "pids": pids,
        "targets": [t.name for t in bench.targets], "max_tokens": args.max_tokens,
        "duration_s": args.duration, "warmup_s": args.warmup, "generator_cpus": args.generator_cpus,
        "gateway_cpus": args.gateway_cpus,
        **bench.notes,
    }
    if profile is not None:
        meta["profile"] = profile
    doc = report.sanitize(report.build(stream_steps, plain_steps, relay, roundtrips, meta))
    text = report.markdown(doc)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    failed = [s for s in stream_steps + plain_steps if "worker_error" in s]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.overhead",
                                     description="What the gateway adds per request, against direct and LiteLLM")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130
