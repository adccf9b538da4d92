"""What the gateway knows of one request before the scheduler has it: who sent it, its
tier, hints and deadline, and its trace; and waiting on work while watching the client."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncGenerator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from gateway import sse
from gateway.request.disconnect import ClientGone, DisconnectWatch
from gateway.telemetry.tracing import RequestTrace
from scheduler.job import Job
from scheduler.policy.quota import QuotaLimits


class StillQueued(Exception):
    """The wait outlasted its patience; the work goes on."""


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    tier: str
    admin: bool
    key_id: str = ""  # "" for the open gateway's anonymous caller
    quotas: QuotaLimits | None = None  # the key's own limits
    trust_hints: bool = False  # may send x-triage-expected-tokens (api_keys[].trust_hints)


@dataclass(frozen=True, slots=True)
class RequestContext:
    request_id: str
    principal: Principal
    tier: str
    hint: int | None  # x-triage-expected-tokens
    oracle_tokens: int | None  # x-triage-oracle-tokens (oracle policy only)
    timeout_s: float
    trace: RequestTrace  # spans and metrics of this request
    arrived: float  # time.monotonic() when the request arrived
    client_request_id: str | None = None  # the client's own x-request-id, when it sent a valid one

    @property
    def echo_id(self) -> str:
        """The x-request-id the client gets back: its own if it sent one, else ours."""
        return self.client_request_id or self.request_id


async def until_disconnect(watch: DisconnectWatch, work: asyncio.Future[Any], patience_s: float | None = None) -> Any:
    """Await ``work`` unless the client leaves first (cancel it, raise ClientGone) or
    ``patience_s`` passes (leave it running, raise StillQueued)."""
    if watch.gone:
        work.cancel()
        raise ClientGone()
    if work.done():  # granted in the enqueue's own reply: no wait (asyncio.wait would still take a turn of the loop)
        return work.result()
    await asyncio.wait({work, watch.task}, timeout=patience_s, return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        return work.result()
    if not watch.gone:
        raise StillQueued()
    work.cancel()
    with suppress(asyncio.CancelledError):
        await work
    raise ClientGone()


async def queued_comments(job: Job, work: asyncio.Future[Any], every_s: float) -> AsyncGenerator[bytes, None]:
    """SSE keep-alive comments with the request's place, every ``every_s`` until ``work`` is done."""
    while not work.done():
        position = await job.position()
        if position is None:
            yield sse.comment("queued")  # place unknown (Redis away, or just granted): keep alive
        else:
            rate = job.drain_rate()
            eta = f" eta_ms={int(position / rate * 1000)}" if rate > 0 else ""
            yield sse.comment(f"queued position={position}{eta}")
        await asyncio.wait({work}, timeout=every_s)


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex}"


MAX_CLIENT_REQUEST_ID = 128
_CLIENT_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_CLIENT_REQUEST_ID}}}")


def client_request_id(value: str | None) -> str | None:
    """A client's ``x-request-id`` when it is one we can echo: printable ASCII without
    spaces, at most 128 characters; else None (ours is used). It is echoed and traced,
    never used as a key: tickets and leases keep our own id, unique per request."""
    return value if value is not None and _CLIENT_ID.fullmatch(value) else None
