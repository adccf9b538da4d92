"""Test helpers: real servers on loopback (``running_app``) and bounded condition waits."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path

from simulator.testing import running_app

__all__ = ["MODEL", "ROOT", "eventually", "running_app"]

MODEL = "sim-model"  # the model the shared simulator serves
ROOT = Path(__file__).resolve().parents[1]  # the repository


async def eventually(condition: Callable[[], Awaitable[bool] | bool], within_s: float = 10.0) -> None:
    """Wait for a condition on state we cannot subscribe to (Redis, another process), bounded."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within_s} s")
        await asyncio.sleep(0.01)
