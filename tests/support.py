"""Test helpers: real servers on loopback (``running_app``) and bounded condition waits."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import io
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeGuard

import uvicorn
from redis.asyncio import Redis

from gateway.settings import Settings
from scheduler.queue import readback
from scheduler.queue.keys import PoolKeys
from simulator.testing import running_app, serving

__all__ = [
    "MODEL", "ROOT", "busy_is", "eventually", "is_pending_task", "pending_tasks", "progress_past", "queue_is", "running_app",
    "serving_gateway",
]

MODEL = "sim-model"  # the model the shared simulator serves
ROOT = Path(__file__).resolve().parents[1]  # the repository


async def eventually(
    condition: Callable[[], Awaitable[bool] | bool], within_s: float = 10.0, every_s: float = 0.01
) -> None:
    """Wait for a condition on state we cannot subscribe to (Redis, another process), bounded;
    ``every_s`` between checks (longer for a check that costs the other side real work)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within_s} s")
        await asyncio.sleep(every_s)


async def queue_is(redis: Redis, keys: PoolKeys, n: int) -> bool:
    """Does the pool's queue hold ``n`` tickets?"""
    return await redis.zcard(keys.queue) == n


async def busy_is(redis: Redis, keys: PoolKeys, n: int, backend: str = "sim") -> bool:
    """Does ``backend`` hold ``n`` leases (every replica's)?"""
    return await readback.busy(redis, keys, backend) == n

async def progress_past(redis: Redis, keys: PoolKeys, tokens: int) -> bool:
    """Has some lease reported more than ``tokens`` output tokens (a pause candidate)?"""
    return any(made > tokens for made, _ in (await readback.progress(redis, keys)).values())


def serving_gateway(settings: Settings) -> contextlib.AbstractContextManager[str]:
    """Serve a gateway as ``triage serve`` does (its connection limits included), on a free port."""
    from gateway.app import create_app
    from gateway.server.connections import server_options

    def config(port: int) -> uvicorn.Config:
        options = {**server_options(settings), "port": port}
        return uvicorn.Config(create_app(settings), log_level="warning", lifespan="on",
                              timeout_graceful_shutdown=2, **options)

    return serving(config, settings.host)


def is_pending_task(obj: object) -> TypeGuard[asyncio.Task[Any]]:
    """An unfinished asyncio task; False for anything else, a dead weak proxy included
    (``isinstance`` on a proxy whose object is gone raises ReferenceError)."""
    try:
        return isinstance(obj, asyncio.Task) and not obj.done()
    except ReferenceError:
        return False


def pending_tasks(limit_chars: int = 40_000) -> str:
    """Every unfinished asyncio task in this process, on any thread's loop, with where it
    waits: what a test that timed out was waiting for (the test's own loop and every
    server it started in a thread)."""
    out = io.StringIO()
    for task in [o for o in gc.get_objects() if is_pending_task(o)]:
        out.write(f"--- {task.get_name()}: {task.get_coro()!r}\n")
        try:
            task.print_stack(limit=12, file=out)
        except Exception as exc:  # noqa: BLE001 - another thread's task moved on meanwhile
            out.write(f"(stack unreadable: {exc!r})\n")
        if out.tell() > limit_chars:
            out.write("... (more tasks left out)\n")
            break
    return out.getvalue()
