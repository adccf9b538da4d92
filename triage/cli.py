"""The ``triage`` command: ``serve``, ``sim``, ``loadtest``, ``bench compare|overhead|redis|fleet|chaos``,
``predictor eval``, ``predictor finetune``, ``predictor warm-start``, ``engine vllm``,
``engine llamacpp``.

It stands above every subsystem (the gateway, the simulator, the load tools, the
predictor's tools) and imports each only when its subcommand runs. A configuration
error prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys

from gateway.settings import ConfigError, load_settings


def serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gateway.serve import run
    from gateway.server.reload import ConfigSource

    flags = {"host": args.host, "port": args.port, "policy": args.policy, "workers": args.workers}
    path = Path(args.config) if args.config else None
    run(load_settings(path, **flags), ConfigSource(path, flags))  # the source: reloaded on SIGHUP
    return 0


def sim(args: argparse.Namespace) -> int:
    from simulator.server import run, settings_from_args

    run(settings_from_args(args))
    return 0


def predictor(action: str, argv: list[str]) -> int:
    """``predictor eval|finetune``: the rest of the line goes to the tool as it is (argparse's
    REMAINDER would not take a line that starts with an option, such as ``--train``)."""
    if action == "warm-start":
        from scheduler.predictor.tools.warm_start import main as warm_start_main

        return warm_start_main(argv)
    from scheduler.predictor.tools.evaluate import finetune_main
    from scheduler.predictor.tools.evaluate import main as eval_main

    return (finetune_main if action == "finetune" else eval_main)(argv)


def engine(name: str, argv: list[str]) -> int:
    """``engine vllm`` / ``engine llamacpp``: a real engine serving a tiny random-weight model
    (its tool parses the line)."""
    if name == "llamacpp":
        from loadtests.engines.llamacpp_cli import main as llamacpp_main

        return llamacpp_main(argv)
    from loadtests.engines.cli import main as engine_main

    return engine_main(argv)


def loadtest(args: argparse.Namespace) -> int:
    from loadtests.cli import run_loadtest

    return run_loadtest(args)


def bench_compare(args: argparse.Namespace) -> int:
    from loadtests.cli import run_compare

    return run_compare(args)


def bench_overhead(args: argparse.Namespace) -> int:
    from loadtests.overhead.cli import run

    return run(args)


def bench_redis(args: argparse.Namespace) -> int:
    from loadtests.redisbench import run

    return run(args)


def bench_fleet(args: argparse.Namespace) -> int:
    from loadtests.fleet import run

    return run(args)


def bench_chaos(args: argparse.Namespace) -> int:
    from loadtests.chaos.cli import run

    return run(args)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The flags of the load tools are added only when ``command`` needs them: their
    imports (plotting, progress bars) would slow every ``triage serve``."""
    from simulator.server import add_arguments

    load_tools = command in ("loadtest", "bench")
    if load_tools:
        from loadtests.chaos.cli import add_arguments as add_chaos_arguments
        from loadtests.cli import add_compare_arguments, add_loadtest_arguments
        from loadtests.fleet import add_arguments as add_fleet_arguments
        from loadtests.overhead.cli import add_arguments as add_overhead_arguments

    parser = argparse.ArgumentParser(prog="triage", description="Priority-scheduling gateway for LLM inference")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the gateway")
    p.add_argument("--config", default=None, help="YAML config file (default: $TRIAGE_CONFIG)")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--policy", choices=["fifo", "short_first", "strict_priority", "oracle"], default=None)
    p.add_argument("--workers", type=int, default=None, help="worker processes on the port, each a full replica")
    p.set_defaults(func=serve)

    p = sub.add_parser("sim", help="run one simulated GPU backend")
    add_arguments(p)
    p.set_defaults(func=sim)

    p = sub.add_parser("loadtest", help="mixed-traffic load against any OpenAI-compatible URL")
    if load_tools:
        add_loadtest_arguments(p)
    p.set_defaults(func=loadtest)

    p = sub.add_parser("bench", help="benchmarks that start everything they need")
    bsub = p.add_subparsers(dest="bench", required=True)
    b = bsub.add_parser("compare", help="direct vs fifo vs short_first vs oracle on one seeded trace")
    if load_tools:
        add_compare_arguments(b)
    b.set_defaults(func=bench_compare)
    b = bsub.add_parser("overhead", help="what the gateway adds, beside a direct connection and LiteLLM")
    if load_tools:
        add_overhead_arguments(b)
    b.set_defaults(func=bench_overhead)
    b = bsub.add_parser("redis", help="scheduled requests/s one Redis core sustains, of the scripts alone")
    if load_tools:
        from loadtests.redisbench import add_arguments as add_redis_arguments

        add_redis_arguments(b)
    b.set_defaults(func=bench_redis)
    b = bsub.add_parser("fleet", help="many gateway replicas and many backends on one Redis: limits, order, Redis CPU")
    if load_tools:
        add_fleet_arguments(b)
    b.set_defaults(func=bench_fleet)
    b = bsub.add_parser("chaos", help="fuzz, disconnect storm, slow clients and soak (docs/benchmarks/reliability.md)")
    if load_tools:
        add_chaos_arguments(b)
    b.set_defaults(func=bench_chaos)

    p = sub.add_parser("predictor", help="the output-length predictor")
    psub = p.add_subparsers(dest="action", required=True)
    psub.add_parser("eval", help="train on files, report on another (--help for its flags)")
    psub.add_parser("finetune", help="fine-tune the encoder (embed extra), save it for predictor_weights")
    psub.add_parser("warm-start", help="build the shipped warm start, or measure day one (build|evaluate)")

    p = sub.add_parser("engine", help="real engines on loopback")
    esub = p.add_subparsers(dest="engine", required=True)
    esub.add_parser("vllm", help="serve a tiny random-weight Llama with vLLM (--help for its flags)")
    esub.add_parser("llamacpp", help="serve a tiny random-weight Llama (GGUF) with llama.cpp (--help for its flags)")
    return parser


# Libraries that log every request at INFO: the gateway's own access log and request log
# say what happened to a request; these would add a line (and its cost) per upstream call.
QUIET_LOGGERS = ("httpx", "httpcore")


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    import os

    configure_logging()
    words = sys.argv[1:] if argv is None else argv
    if len(words) >= 2 and words[0] == "predictor" and words[1] in ("eval", "finetune", "warm-start"):
        return predictor(words[1], words[2:])  # the tool parses its own flags
    if len(words) >= 2 and words[0] == "engine" and words[1] in ("vllm", "llamacpp"):
        return engine(words[1], words[2:])
    args = build_parser(words[0] if words else None).parse_args(words)
    if getattr(args, "config", None) is None and "TRIAGE_CONFIG" in os.environ:
        args.config = os.environ["TRIAGE_CONFIG"]
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"triage: config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
