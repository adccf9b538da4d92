"""Running the simulator: the command line and the uvicorn server.

``add_arguments`` / ``settings_from_args`` are shared with the project CLI
(``triage sim``), so both accept the same flags.
"""

from __future__ import annotations

import argparse
import logging

import uvicorn

from simulator.app import create_app
from simulator.dialects import SERVER, Dialect
from simulator.faults import FaultSettings, InjectedDrop
from simulator.length_table import LengthTableError
from simulator.profiles import BUILTIN_PROFILES, BatchingMode
from simulator.settings import SimSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the simulator's flags to ``parser``. Defaults match ``SimSettings``."""
    d = SimSettings()
    parser.add_argument("--host", default=d.host, help=f"interface to bind (default {d.host})")
    parser.add_argument("--port", type=int, default=d.port, help=f"port to bind (default {d.port})")
    parser.add_argument(
        "--profile",
        default=d.profile,
        choices=sorted(BUILTIN_PROFILES),
        help=f"engine profile (default {d.profile})",
    )
    parser.add_argument("--model", default=d.model, help=f"model name served (default {d.model})")
    parser.add_argument("--max-num-seqs", type=int, help="sequences running at once (profile default)")
    parser.add_argument("--max-num-batched-tokens", type=int, help="token budget per engine step")
    parser.add_argument("--kv-capacity-tokens", type=int, help="KV-cache size in tokens")
    parser.add_argument("--max-model-len", type=int, help="context window in tokens")
    parser.add_argument("--mode", choices=[m.value for m in BatchingMode], help="batching mode")
    parser.add_argument("--median-output-tokens", type=int, help="median natural output length")
    parser.add_argument("--seed", type=int, help="seed of output lengths and injected failures")
    parser.add_argument(
        "--prefix-caching",
        "--enable-prefix-caching",
        dest="prefix_caching",
        action=argparse.BooleanOptionalAction,
        help="model vLLM's automatic prefix caching (profile default: on, off for instant)",
    )
    parser.add_argument("--block-size", type=int, help="tokens per KV block (profile default 16)")
    parser.add_argument(
        "--length-table",
        metavar="PATH",
        help='JSONL of {"prompt": ..., "output_tokens": N}: natural output lengths of known prompts',
    )
    parser.add_argument("--time-scale", type=float, default=d.time_scale, help="multiply every step duration")
    parser.add_argument(
        "--dialect",
        default=d.dialect.value,
        choices=[x.value for x in Dialect],
        help=f"whose SSE framing, /metrics names, server header and model ids (default {d.dialect.value})",
    )
    faults = parser.add_argument_group("fault injection (all off by default)")
    faults.add_argument("--fail-rate", type=float, default=0.0, help="fraction of requests refused")
    faults.add_argument("--fail-status", type=int, default=503, help="HTTP status of refusals (default 503)")
    faults.add_argument("--retry-after", type=float, help="Retry-After seconds sent with refusals")
    faults.add_argument("--drop-after-tokens", type=int, help="cut connections after this many tokens")
    faults.add_argument("--down", action="store_true", help="health and requests answer 503")


def settings_from_args(ns: argparse.Namespace) -> SimSettings:
    """The ``SimSettings`` described by parsed ``add_arguments`` flags."""
    return SimSettings(
        host=ns.host,
        port=ns.port,
        profile=ns.profile,
        model=ns.model,
        max_num_seqs=ns.max_num_seqs,
        max_num_batched_tokens=ns.max_num_batched_tokens,
        kv_capacity_tokens=ns.kv_capacity_tokens,
        max_model_len=ns.max_model_len,
        mode=BatchingMode(ns.mode) if ns.mode else None,
        median_output_tokens=ns.median_output_tokens,
        seed=ns.seed,
        prefix_caching=ns.prefix_caching,
        block_size=ns.block_size,
        length_table=ns.length_table,
        time_scale=ns.time_scale,
        dialect=Dialect(ns.dialect),
        faults=FaultSettings(
            fail_rate=ns.fail_rate,
            status_code=ns.fail_status,
            retry_after=ns.retry_after,
            drop_after_tokens=ns.drop_after_tokens,
            down=ns.down,
        ),
    )


class QuietInjectedDrops(logging.Filter):
    """Drops uvicorn's traceback for connections cut on purpose by the drop fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], InjectedDrop))


def quiet_injected_drops() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, QuietInjectedDrops) for f in logger.filters):
        logger.addFilter(QuietInjectedDrops())


def uvicorn_config(settings: SimSettings) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        server_header=SERVER[settings.dialect] == "uvicorn",  # other servers name themselves, or not at all
        lifespan="on",
        # Streams in flight are aborted by the engine on shutdown; no need to wait long.
        timeout_graceful_shutdown=2,
    )


def run(settings: SimSettings) -> None:
    """Serve until interrupted (blocking). A bad length table exits with its message."""
    quiet_injected_drops()
    try:
        config = uvicorn_config(settings)
    except LengthTableError as exc:
        raise SystemExit(f"simulator: {exc}") from None
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:
        pass  # SIGINT is how it is asked to stop (Ctrl-C, or a parent stopping its child)
