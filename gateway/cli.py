"""The ``triage`` command: ``serve``, ``sim``, ``loadtest``, ``bench compare|overhead``,
``predictor eval``, ``predictor finetune``.

``serve`` with no ``redis_url`` starts an embedded Valkey; with no backends, one
simulated backend. Ctrl-C stops the gateway and everything it started. A
configuration error prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack

import redis

from gateway.settings import BackendSettings, ConfigError, Settings, load_settings


def _check_redis(url: str) -> None:
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3).ping()
    except (redis.RedisError, ValueError) as exc:
        raise ConfigError(f"redis_url: cannot reach {url} ({exc})") from None


def _banner(settings: Settings, embedded: list[str]) -> str:
    base = f"http://{settings.host}:{settings.port}"
    model = settings.backends[0].models[0] if settings.backends and settings.backends[0].models else "<model>"
    lines = [
        "",
        f"Triage gateway on {base}  (policy: {settings.policy.value})",
        *[f"  {line}" for line in embedded],
        "",
        "Try it:",
        f"  curl {base}/v1/chat/completions -H 'content-type: application/json' \\",
        f"    -d '{{\"model\": \"{model}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'",
        "",
        "  python -c \"from openai import OpenAI; c = OpenAI(base_url='" + base + "/v1', api_key='none'); "
        f"print(c.chat.completions.create(model='{model}', "
        "messages=[{'role': 'user', 'content': 'Hello'}]).choices[0].message.content)\"",
        "",
        "Ctrl-C stops it.",
        "",
    ]
    return "\n".join(lines)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import create_app
    from gateway.embedded import EmbeddedRedis, EmbeddedSimulator

    settings = load_settings(args.config, host=args.host, port=args.port, policy=args.policy)
    embedded: list[str] = []
    with ExitStack() as stack:
        if not settings.redis_url:
            server = EmbeddedRedis()
            url = server.start()
            stack.callback(server.stop)
            settings = settings.model_copy(update={"redis_url": url})
            embedded.append(f"embedded Redis-protocol server (Valkey) at {url}; state is not kept")
        else:
            _check_redis(settings.redis_url)
        if not settings.backends:
            sim = EmbeddedSimulator(settings.simulator_profile, settings.simulator_model)
            stack.callback(sim.stop)
            url = sim.start()
            backend = BackendSettings(name="sim", url=url, models=[settings.simulator_model], max_concurrency=64)
            settings = settings.model_copy(update={"backends": [backend]})
            embedded.append(
                f"simulated backend '{settings.simulator_model}' ({settings.simulator_profile}) at {url}"
            )
        print(_banner(settings, embedded), flush=True)
        config = uvicorn.Config(
            create_app(settings), host=settings.host, port=settings.port, log_level="info",
            access_log=settings.access_log, timeout_graceful_shutdown=10,
        )
        _quiet_stop_server()(config).run()
    return 0


def _quiet_stop_server() -> type:
    import uvicorn

    class QuietStopServer(uvicorn.Server):
        """Stops gracefully on SIGINT / SIGTERM and then simply returns.

        uvicorn re-raises the signal after its graceful shutdown; under uvloop that
        KeyboardInterrupt lands in the finished lifespan task and prints a traceback on
        every Ctrl-C (uvicorn issue #1579). The shutdown is already done, so it is dropped;
        the embedded servers are stopped afterwards by ``serve``.
        """

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return QuietStopServer


def sim(args: argparse.Namespace) -> int:
    from simulator.server import run, settings_from_args

    run(settings_from_args(args))
    return 0


def predictor(action: str, argv: list[str]) -> int:
    """``predictor eval|finetune``: the rest of the line goes to the tool as it is (argparse's
    REMAINDER would not take a line that starts with an option, such as ``--train``)."""
    from scheduler.predictor.tools.evaluate import finetune_main
    from scheduler.predictor.tools.evaluate import main as eval_main

    return (finetune_main if action == "finetune" else eval_main)(argv)


def loadtest(args: argparse.Namespace) -> int:
    from loadtests.cli import run_loadtest

    return run_loadtest(args)


def bench_compare(args: argparse.Namespace) -> int:
    from loadtests.cli import run_compare

    return run_compare(args)


def bench_overhead(args: argparse.Namespace) -> int:
    from loadtests.overhead.cli import run

    return run(args)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The flags of the load tools are added only when ``command`` needs them: their
    imports (plotting, progress bars) would slow every ``triage serve``."""
    from simulator.server import add_arguments

    load_tools = command in ("loadtest", "bench")
    if load_tools:
        from loadtests.cli import add_compare_arguments, add_loadtest_arguments
        from loadtests.overhead.cli import add_arguments as add_overhead_arguments

    parser = argparse.ArgumentParser(prog="triage", description="Priority-scheduling gateway for LLM inference")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the gateway")
    p.add_argument("--config", default=None, help="YAML config file (default: $TRIAGE_CONFIG)")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--policy", choices=["fifo", "short_first", "strict_priority", "oracle"], default=None)
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

    p = sub.add_parser("predictor", help="the output-length predictor")
    psub = p.add_subparsers(dest="action", required=True)
    psub.add_parser("eval", help="train on files, report on another (--help for its flags)")
    psub.add_parser("finetune", help="fine-tune the encoder (embed extra), save it for predictor_weights")
    return parser


def main(argv: list[str] | None = None) -> int:
    import os

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    words = sys.argv[1:] if argv is None else argv
    if len(words) >= 2 and words[0] == "predictor" and words[1] in ("eval", "finetune"):
        return predictor(words[1], words[2:])  # the tool parses its own flags
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
