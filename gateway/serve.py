"""Run one gateway: ``triage serve``. With no ``redis_url`` an embedded Valkey is started;
with no backends, one simulated backend. Ctrl-C stops the gateway and everything it started.
"""

from __future__ import annotations

import functools
import os
from contextlib import ExitStack
from typing import Any

import redis

from gateway.server import redis_client
from gateway.server.reload import ConfigSource
from gateway.settings import BackendSettings, ConfigError, Settings


def _check_redis(url: str) -> None:
    try:
        redis_client.check(url)
    except (redis.RedisError, ValueError) as exc:
        where = redis_client.parse(url).describe() if _parses(url) else url
        raise ConfigError(f"redis_url: cannot reach {where} ({exc})") from None


def _parses(url: str) -> bool:
    try:
        redis_client.parse(url)
    except ValueError:
        return False
    return True


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


def run(settings: Settings, source: ConfigSource | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM (both drain first); ``ConfigError`` if Redis cannot be reached.
    ``source``: where the settings came from; the gateway reloads it on SIGHUP and
    when the file changes (the embedded servers stay as they were started)."""
    import uvicorn

    from gateway.app import create_app
    from gateway.server.connections import server_options
    from gateway.server.drain import draining_server, quiet_stop_server
    from gateway.server.embedded import EmbeddedRedis, EmbeddedSimulator

    embedded: list[str] = []
    with ExitStack() as stack:
        if not settings.redis_url:
            server = EmbeddedRedis()
            url = server.start()
            stack.callback(server.stop)
            settings = settings.model_copy(update={"redis_url": url})
            if source is not None:
                source = ConfigSource(source.path, {**source.overrides, "redis_url": url})
            embedded.append(f"embedded Redis-protocol server (Valkey) at {url}; state is not kept")
        else:
            _check_redis(settings.redis_url)
        if not settings.backends:
            sim = EmbeddedSimulator(settings.simulator_profile, settings.simulator_model)
            stack.callback(sim.stop)
            url = sim.start()
            backend = BackendSettings(
                name="sim", url=url, models=[settings.simulator_model], max_concurrency=64, resume="vllm"
            )
            settings = settings.model_copy(update={"backends": [backend]})
            if source is not None:
                source = ConfigSource(source.path, {**source.overrides, "backends": [backend]})
            embedded.append(
                f"simulated backend '{settings.simulator_model}' ({settings.simulator_profile}) at {url}"
            )
        if settings.request_log:
            from gateway.telemetry.request_log import to_stdout

            to_stdout()
        if settings.workers > 1:
            embedded.append(f"{settings.workers} worker processes, each a full replica (own owner id, inbox, heartbeat)")
        print(_banner(settings, embedded), flush=True)
        if settings.workers > 1:
            _run_workers(settings, source)
            return
        app = create_app(settings, source=source, freeze_after_start=True)
        config = uvicorn.Config(
            app, log_level="info", timeout_graceful_shutdown=10, **server_options(settings),
        )
        # the first SIGTERM / SIGINT drains (gateway/server/drain.py), a second one stops at once
        draining_server(quiet_stop_server(), config, app.state.drain).run()


def worker_app(settings_json: str, source_doc: str | None = None) -> Any:
    """The app of one worker process (uvicorn's factory): its own replica of the gateway,
    reloaded from ``source_doc`` (the config file and flags, ``workers.source_json``) as a
    single process is; its drain is kept where the worker's server finds it."""
    from gateway.app import create_app
    from gateway.server import workers

    settings = Settings.model_validate_json(settings_json)
    if settings.request_log:
        from gateway.telemetry.request_log import to_stdout

        to_stdout()
    app = create_app(settings, source=workers.source_of(source_doc), freeze_after_start=True)
    workers.keep_drain(app.state.drain)
    return app


def _run_workers(settings: Settings, source: ConfigSource | None) -> None:
    """``workers`` processes share one listening socket, bound here; the embedded servers
    started above are shared by all. Each is a replica of its own with the drain and the
    reload of a single process (``gateway/server/workers.py``)."""
    import uvicorn

    from gateway.server.connections import WORKER_SETTINGS_ENV, server_options
    from gateway.server.workers import Supervisor, log_config, source_json

    os.environ[WORKER_SETTINGS_ENV] = settings.model_dump_json()
    options = {**server_options(settings), "http": "gateway.server.connections:WorkerProtocol"}  # importable by name
    # the app factory: picklable (a module function and strings), each worker builds its own app
    app = functools.partial(worker_app, settings.model_dump_json(), source_json(source))
    config = uvicorn.Config(
        app, factory=True, workers=settings.workers, log_config=log_config(),
        log_level="info", timeout_graceful_shutdown=10, **options,
    )
    sock = config.bind_socket()
    try:
        Supervisor(config, sockets=[sock]).run()
    finally:
        sock.close()
