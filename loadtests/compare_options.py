"""What one ``bench compare`` is asked to do: its flags, parsed once into a ``CompareConfig``.

The simulator comparison (``loadtests/compare.py``) and the vLLM one
(``loadtests/engines/bench.py``) read the same flags into the same settings; the flags
only a real engine has live with it (``engines.bench.add_arguments``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.modes import DEFAULT_MODES, MODES, gateway_settings, is_mode
from loadtests.options import UsageError, resolve_data_dir
from loadtests.stack import SimSpec

__all__ = ["CompareConfig", "CompareError", "add_arguments", "compare_config", "gateway_settings"]


class CompareError(Exception):
    """A comparison that cannot run, as one line."""


@dataclass(frozen=True, slots=True)
class CompareConfig:
    workload: str
    loads: tuple[float, ...]
    modes: tuple[str, ...]
    sim: SimSpec
    backends: int
    duration_s: float
    drain_s: float
    warmup_s: float
    capacity_s: float
    capacity_rps: float | None  # given: skip the measurement
    seed: int
    data_dir: Path | None
    out: Path
    json_path: Path
    quiet: bool
    train_s: float = 0.0  # teach the gateways' predictor first, on other prompts (seed + 1)
    gateway_settings: dict[str, Any] = field(default_factory=dict)  # --gateway-set, every measured gateway
    resume: str = "vllm"  # how the backends continue a paused generation (the *_preempt modes)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of every comparison, whatever its backends."""
    p.add_argument("--loads", default="0.7,0.9,1.1", help="fractions of capacity (default 0.7,0.9,1.1)")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES),
                   help=f"subset of {','.join(MODES)}; MODE@KEY=VALUE[@...] is an arm of MODE with gateway "
                        "settings of its own")
    p.add_argument("--duration", type=float, default=45.0, help="sending window per run, s (default 45)")
    p.add_argument("--drain", type=float, default=90.0, help="max wait for in-flight requests per run, s")
    p.add_argument("--warmup-s", type=float, default=5.0, help="exclude requests sent in the first T s")
    p.add_argument("--profile", default="llama-8b-h100", help="simulator profile (default llama-8b-h100)")
    p.add_argument("--model", default="sim-model")
    p.add_argument("--max-num-seqs", type=int, default=8, help="batch slots per backend (default 8)")
    p.add_argument("--backends", type=int, default=1, help="simulated backends (default 1)")
    p.add_argument("--sim-time-scale", type=float, default=1.0, help="simulator step-time multiplier")
    p.add_argument("--capacity-s", type=float, default=20.0, help="length of the capacity run, s")
    p.add_argument("--capacity", type=float, default=None, help="capacity in RPS: skip measuring it")
    p.add_argument("--out", default="compare-out", help="folder for compare.md, compare.png, logs")
    p.add_argument("--json", default=None, help="JSON report path (default OUT/compare.json)")
    p.add_argument("--train-s", type=float, default=60.0,
                   help="before the runs, teach the length predictor for this long on other prompts of the "
                        "same workload (its training part, one prompt in four, seed + 1), as a gateway in "
                        "service would have learned; 0: cold")
    p.add_argument("--gateway-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a gateway setting for every measured gateway (repeatable; the value is read as "
                        "YAML), e.g. --gateway-set long_share_max=0.75; the mode's own settings win")
    p.add_argument("--smoke", action="store_true",
                   help="tiny run for tests: fast profile, one load, a few seconds per mode")


def compare_config(args: argparse.Namespace) -> CompareConfig:
    try:
        loads = tuple(float(x) for x in args.loads.split(",") if x.strip())
    except ValueError:
        raise UsageError("--loads: comma-separated numbers, e.g. 0.7,0.9,1.1") from None
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not loads or any(x <= 0 for x in loads):
        raise UsageError("--loads: at least one load, each > 0")
    if not modes or any(not is_mode(m) for m in modes):
        raise UsageError(f"--modes: a comma-separated subset of {','.join(MODES)}, each optionally with "
                         "@KEY=VALUE gateway settings of its own (e.g. short_first_preempt@max_slack_s=10)")
    if args.backends < 1 or args.max_num_seqs < 1 or args.duration <= 0:
        raise UsageError("--backends, --max-num-seqs and --duration must be positive")
    sim = SimSpec(args.profile, args.model, args.max_num_seqs, args.sim_time_scale)
    duration, drain, warmup, capacity_s = args.duration, args.drain, args.warmup_s, args.capacity_s
    train_s = args.train_s
    if args.smoke:
        loads, sim = loads[:1], SimSpec("fast", args.model, 4, 1.0)
        duration, drain, warmup, capacity_s, train_s = 3.0, 30.0, 0.0, 3.0, min(train_s, 2.0)
    out = Path(args.out)
    settings = gateway_settings(args.gateway_set)
    return CompareConfig(args.workload, loads, modes, sim, args.backends, duration, drain, warmup, capacity_s,
                         args.capacity, args.seed, resolve_data_dir(args.data_dir), out,
                         Path(args.json) if args.json else out / "compare.json", args.quiet, train_s, settings)
