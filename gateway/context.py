"""What the gateway knows of one request before the scheduler has it: who sent it, its
tier, hints and deadline, and its trace; and waiting on work while watching the client."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from gateway.auth import Principal
from gateway.disconnect import ClientGone, DisconnectWatch
from gateway.telemetry.tracing import RequestTrace


class StillQueued(Exception):
    """The wait outlasted its patience; the work goes on."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    request_id: str
    principal: Principal
    tier: str
    hint: int | None  # x-triage-expected-tokens
    oracle_tokens: int | None  # x-triage-oracle-tokens (oracle policy only)
    timeout_s: float
    trace: RequestTrace  # spans and metrics of this request
    on_length: Callable[[int], None] | None = None  # told the reply's real output tokens, once known


async def until_disconnect(watch: DisconnectWatch, work: asyncio.Future[Any], patience_s: float | None = None) -> Any:
    """Await ``work`` unless the client leaves first (cancel it, raise ClientGone) or
    ``patience_s`` passes (leave it running, raise StillQueued)."""
    if watch.gone:
        work.cancel()
        raise ClientGone()
    await asyncio.wait({work, watch.task}, timeout=patience_s, return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        return work.result()
    if not watch.gone:
        raise StillQueued()
    work.cancel()
    with suppress(asyncio.CancelledError):
        await work
    raise ClientGone()


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex}"
