"""One typed wrapper per Lua script. The only module that knows the scripts' ARGV order.

Scripts live in ``lua/``. What every script shares is prepended to each, so each call
is one atomic unit: ``_common.lua`` (the pool's key names, the arguments, the record
formats), ``_slots.lua`` (the pool's backends as one script sees them; taking and
giving back a slot), ``_owners.lua`` (replicas: alive, the backends each can call,
messages) and ``_dispatch.lua`` (the dispatch itself). redis-py's ``Script`` runs them
by SHA and reloads them by itself after a Redis restart (NOSCRIPT).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.asyncio import Redis

from scheduler.queue.keys import PoolKeys
from scheduler.queue.records import parse_message
from scheduler.types import BackendRecord, Message, Ticket

LIBRARY = ("_common.lua", "_slots.lua", "_owners.lua", "_dispatch.lua")  # prepended, in this order


def _source(name: str) -> str:
    return (resources.files("scheduler.queue") / "lua" / name).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    status: int  # 1 queued, -1 pool queue full, -2 tenant queue full
    queue_len: int
    messages: list[Message]


@dataclass(frozen=True, slots=True)
class Timing:
    lease_ttl_s: float
    owner_ttl_s: float
    max_scan: int  # queued tickets a dispatch looks at, best first
    max_slack_s: float = 30.0  # the starvation bound (caps slack + fairness lead)
    # pause and resume: an urgent ticket with no free slot may take a running lease's
    preempt: bool = False
    quantum_tokens: int = 64  # output tokens a lease runs before it may be paused
    max_pauses: int = 2  # per request
    preempt_after_s: float = 0.0  # how long the urgent ticket waits first


class Scripts:
    """The scheduler's Lua scripts, registered once per Redis client.

    ``source``: file name -> Lua text (default: the files in ``lua/``; a benchmark
    passes another version's to compare; a name it lacks reads as empty)."""

    def __init__(self, redis: Redis, timing: Timing, source: Callable[[str], str] = _source) -> None:
        lib = "\n".join(source(name) for name in LIBRARY) + "\n"
        self._timing = timing
        self._enqueue = redis.register_script(lib + source("enqueue.lua"))
        self._release = redis.register_script(lib + source("release.lua"))
        self._cancel = redis.register_script(lib + source("cancel.lua"))
        self._heartbeat = redis.register_script(lib + source("heartbeat.lua"))
        self._backend = redis.register_script(lib + source("backend.lua"))

    def _common(self, me: str) -> list[Any]:
        """The arguments every dispatching script opens with (``dispatch_args`` in Lua)."""
        t = self._timing
        return [
            me, t.lease_ttl_s, t.owner_ttl_s, t.max_scan, 1 if t.preempt else 0, t.quantum_tokens, t.max_pauses,
            t.preempt_after_s, t.max_slack_s,
        ]

    async def enqueue(
        self, keys: PoolKeys, me: str, ticket: Ticket, max_queue: int, max_tenant_queue: int
    ) -> EnqueueResult:
        t = self._timing
        raw = await self._enqueue(
            keys=[keys.base],
            args=[
                *self._common(me), ticket.id, ticket.model, ticket.tenant, ticket.cls, ticket.predicted,
                ticket.timeout_s, ticket.tier, ticket.slack_s, ticket.tier_offset_s, ticket.cost_s,
                t.max_slack_s, max_queue, max_tenant_queue, ticket.avoid, 1 if ticket.restricted else 0,
                ticket.age_s, ticket.pauses,
            ],
        )
        return EnqueueResult(int(raw[0]), int(raw[1]), [parse_message(m) for m in raw[2:]])

    async def release(self, keys: PoolKeys, me: str, lease: str) -> list[Message]:
        raw = await self._release(keys=[keys.base], args=[*self._common(me), lease])
        return [parse_message(m) for m in raw]

    async def cancel(self, keys: PoolKeys, ticket: str) -> bool:
        return bool(await self._cancel(keys=[keys.base], args=[ticket]))

    async def heartbeat(
        self, keys: PoolKeys, me: str, leases: dict[str, str], quiet: bool = False, waiting: Iterable[str] = (),
        progress: Mapping[str, int] | None = None,
    ) -> tuple[str, int, list[Message]]:
        """``leases``: lease id -> lease record. ``quiet``: no open (short) work expected.
        ``waiting``: the tickets this replica waits for (a lost one is reported).
        ``progress``: lease id -> output tokens so far, for the leases that may be paused.
        Returns this Redis's epoch, the pool's grant counter and the messages for me."""
        progress = progress or {}
        args = [*self._common(me), 1 if quiet else 0, len(leases)]
        for lease, record in leases.items():
            args += [lease, record, progress.get(lease, -1)]
        args += list(waiting)
        raw = await self._heartbeat(keys=[keys.base], args=args)
        epoch = raw[0].decode() if isinstance(raw[0], bytes) else str(raw[0])
        return epoch, int(raw[1]), [parse_message(m) for m in raw[2:]]

    async def set_backend(self, keys: PoolKeys, me: str, backend: BackendRecord) -> list[Message]:
        b = backend
        args = self._common(me) + [
            b.name, b.limit, 1 if b.down else 0, b.weight, b.speed, b.long_cap, b.borrow, 1 if b.resume else 0,
            *b.models,
        ]
        raw = await self._backend(keys=[keys.base], args=args)
        return [parse_message(m) for m in raw]
