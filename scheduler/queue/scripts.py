"""One typed wrapper per Lua script. The only module that knows the scripts' ARGV order.

Scripts live in ``lua/``. What every script shares is prepended to each, so each call
is one atomic unit: ``_common.lua`` (the pool's key names, the arguments, the record
formats), ``_slots.lua`` (the pool's backends as one script sees them; taking and
giving back a slot), ``_owners.lua`` (replicas: alive, the backends each can call,
messages) and ``_dispatch.lua`` (the dispatch itself). ``LuaScript`` runs them by SHA
and loads one again when the server answers NOSCRIPT (after a restart or a failover).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from scheduler.queue.keys import ApiKeyKeys, PoolKeys, QuotaKeys, StatsKeys
from scheduler.queue.records import pack_cost, pack_progress, parse_message
from scheduler.types import BackendRecord, Message, Ticket

LIBRARY = ("_common.lua", "_slots.lua", "_owners.lua", "_dispatch.lua")  # prepended, in this order


def _source(name: str) -> str:
    return (resources.files("scheduler.queue") / "lua" / name).read_text(encoding="utf-8")


class LuaScript:
    """A Lua script called by its SHA (``EVALSHA``), loaded on NOSCRIPT (``SCRIPT LOAD``, then
    once more). What redis-py's ``Script`` does for a client that is not a pipeline (the
    scheduler never calls a script in one), without its imports and pipeline checks on every
    call: two calls on every request's path."""

    __slots__ = ("client", "script", "sha")

    def __init__(self, client: Redis, script: str) -> None:
        self.client = client
        self.script = script
        self.sha = hashlib.sha1(script.encode("utf-8")).hexdigest()

    async def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        try:
            return await self.client.evalsha(self.sha, len(keys), *keys, *args)  # type: ignore[misc]
        except NoScriptError:
            self.sha = await self.client.script_load(self.script)
            return await self.client.evalsha(self.sha, len(keys), *keys, *args)  # type: ignore[misc]


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
    # when a pause pays (policy/preemption.PauseRule)
    pause_ratio: float = 2.0  # the victim's expected remaining output over the urgent one's (0: off)
    pause_backlog: float = 1.0  # queued tickets per slot past which nothing is paused (0: off)
    pause_budget: float = 0.1  # share of a backend's time its re-reads may take
    pause_window_s: float = 30.0  # the budget holds at most pause_budget * pause_window_s seconds
    # queued tickets per slot past which the queue goes in arrival order (0: off)
    fifo_backlog: float = 0.0


class Scripts:
    """The scheduler's Lua scripts, registered once per Redis client.

    ``source``: file name -> Lua text (default: the files in ``lua/``; a benchmark
    passes another version's to compare; a name it lacks reads as empty)."""

    def __init__(self, redis: Redis, timing: Timing, source: Callable[[str], str] = _source) -> None:
        lib = "\n".join(source(name) for name in LIBRARY) + "\n"
        self._timing = timing
        self._enqueue = LuaScript(redis, lib + source("enqueue.lua"))
        self._release = LuaScript(redis, lib + source("release.lua"))
        self._cancel = LuaScript(redis, lib + source("cancel.lua"))
        self._heartbeat = LuaScript(redis, lib + source("heartbeat.lua"))
        self._backend = LuaScript(redis, lib + source("backend.lua"))
        # (pool base, replica) -> the backends that replica registered through these scripts,
        # as enqueue.lua reads them ("b1|b2"): its grant then need not read them back
        self._reach: dict[tuple[str, str], str] = {}

    def _common(self, me: str) -> list[Any]:
        """The arguments every dispatching script opens with (``dispatch_args`` in Lua)."""
        t = self._timing
        return [
            me, t.lease_ttl_s, t.owner_ttl_s, t.max_scan, 1 if t.preempt else 0, t.quantum_tokens, t.max_pauses,
            t.preempt_after_s, t.max_slack_s, t.pause_ratio, t.pause_backlog, t.pause_budget, t.pause_window_s,
            t.fifo_backlog,
        ]

    async def enqueue(
        self, keys: PoolKeys, me: str, ticket: Ticket, max_queue: int, max_tenant_queue: int
    ) -> EnqueueResult:
        t, base = self._timing, keys.base
        raw = await self._enqueue(
            keys=[base],
            args=[
                *self._common(me), ticket.id, ticket.model, ticket.tenant, ticket.cls, ticket.predicted,
                ticket.timeout_s, ticket.tier, ticket.slack_s, ticket.tier_offset_s, ticket.cost_s,
                t.max_slack_s, max_queue, max_tenant_queue, ticket.avoid, 1 if ticket.restricted else 0,
                ticket.age_s, ticket.pauses, self._reach.get((base, me), ""),
            ],
        )
        return EnqueueResult(int(raw[0]), int(raw[1]), [parse_message(m) for m in raw[2:]])

    async def release(self, keys: PoolKeys, me: str, lease: str, record: str = "") -> list[Message]:
        """``record``: the lease as its grant carried it, when the caller holds it (the
        script then need not read it back)."""
        raw = await self._release(keys=[keys.base], args=[*self._common(me), lease, record])
        return [parse_message(m) for m in raw]

    async def cancel(self, keys: PoolKeys, ticket: str) -> bool:
        return bool(await self._cancel(keys=[keys.base], args=[ticket]))

    async def heartbeat(
        self, keys: PoolKeys, me: str, leases: dict[str, str], quiet: bool = False, waiting: Iterable[str] = (),
        progress: Mapping[str, tuple[int, int]] | None = None,
    ) -> tuple[str, int, list[Message]]:
        """``leases``: lease id -> lease record. ``quiet``: no open (short) work expected.
        ``waiting``: the tickets this replica waits for (a lost one is reported).
        ``progress``: lease id -> (output tokens so far, prompt tokens), for the leases
        that may be paused.
        Returns this Redis's epoch, the pool's grant counter and the messages for me."""
        progress = progress or {}
        args = [*self._common(me), 1 if quiet else 0, len(leases)]
        for lease, record in leases.items():
            p = progress.get(lease)
            args += [lease, record, pack_progress(*p) if p is not None else -1]
        args += list(waiting)
        raw = await self._heartbeat(keys=[keys.base], args=args)
        epoch = raw[0].decode() if isinstance(raw[0], bytes) else str(raw[0])
        return epoch, int(raw[1]), [parse_message(m) for m in raw[2:]]

    async def set_backend(self, keys: PoolKeys, me: str, backend: BackendRecord) -> list[Message]:
        b = backend
        known = self._reach.get((keys.base, me), "")
        if b.name not in known.split("|"):
            self._reach[(keys.base, me)] = f"{known}|{b.name}" if known else b.name
        args = self._common(me) + [
            b.name, b.limit, 1 if b.down else 0, b.weight, b.speed, b.long_cap, b.borrow, 1 if b.resume else 0,
            pack_cost(b.cost), *b.models,
        ]
        raw = await self._backend(keys=[keys.base], args=args)
        return [parse_message(m) for m in raw]


@dataclass(frozen=True, slots=True)
class ScopeState:
    """One quota scope after an admission check (the ``x-ratelimit-*`` numbers)."""

    requests_limit: int  # 0: off
    requests_remaining: int
    requests_reset_s: float  # until the bucket is empty again
    tokens_limit: int
    tokens_remaining: int
    tokens_reset_s: float
    running: int


@dataclass(frozen=True, slots=True)
class QuotaResult:
    allowed: int  # 1 admitted (and charged), 0 over a limit now, -1 larger than a limit ever allows
    failed_scope: int  # 1 tenant, 2 key, 0 none
    failed_limit: str  # requests | tokens | concurrent | ""
    retry_after_s: float
    scopes: tuple[ScopeState, ScopeState]  # tenant, key


@dataclass(frozen=True, slots=True)
class ScopeLimits:
    """What ``quota.lua`` is told of one scope; 0 is off."""

    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    concurrent: int = 0


class QuotaScripts:
    """``quota.lua`` (admit), ``quota_settle.lua`` (end) and ``quota_renew.lua`` (still running)."""

    def __init__(self, redis: Redis) -> None:
        self._admit = LuaScript(redis, _source("quota.lua"))
        self._settle = LuaScript(redis, _source("quota_settle.lua"))
        self._renew = LuaScript(redis, _source("quota_renew.lua"))

    async def admit(
        self, keys: QuotaKeys, request_id: str, tokens: int, hold_s: float, tenant: ScopeLimits, key: ScopeLimits
    ) -> QuotaResult:
        args: list[Any] = [request_id, tokens, hold_s]
        for s in (tenant, key):
            args += [s.requests_per_minute, s.tokens_per_minute, s.concurrent]
        raw = await self._admit(keys=keys.all(), args=args)
        which = raw[2].decode() if isinstance(raw[2], bytes) else str(raw[2])
        states = []
        for i in (4, 11):
            v = [int(x) for x in raw[i : i + 7]]
            states.append(ScopeState(v[0], v[1], v[2] / 1000, v[3], v[4], v[5] / 1000, v[6]))
        return QuotaResult(int(raw[0]), int(raw[1]), which, int(raw[3]) / 1000, (states[0], states[1]))

    async def settle(self, keys: QuotaKeys, request_id: str, delta_tokens: int, tenant_tpm: int, key_tpm: int) -> bool:
        return bool(await self._settle(keys=keys.all(), args=[request_id, delta_tokens, tenant_tpm, key_tpm]))

    async def renew(self, running_keys: list[str], hold_s: float, request_ids: Iterable[str]) -> None:
        await self._renew(keys=running_keys, args=[hold_s, *request_ids])


class KeyScripts:
    """``keys.lua``: create and revoke admin-API keys; every change bumps the version."""

    def __init__(self, redis: Redis) -> None:
        self._keys = LuaScript(redis, _source("keys.lua"))

    async def create(self, keys: ApiKeyKeys, key_id: str, sha256: str, record: str) -> int:
        """Returns the new version, or 0 if the id or the hash exists already."""
        return int(await self._keys(keys=[keys.by_hash, keys.ids, keys.version], args=["create", key_id, sha256, record]))

    async def revoke(self, keys: ApiKeyKeys, key_id: str) -> int:
        """Returns the new version, or 0 if there is no such id."""
        return int(await self._keys(keys=[keys.by_hash, keys.ids, keys.version], args=["revoke", key_id]))


class StatsScripts:
    """``stats.lua``: publish one replica's window and list it, expiring both together."""

    def __init__(self, redis: Redis) -> None:
        self._publish = LuaScript(redis, _source("stats.lua"))

    async def publish(self, keys: StatsKeys, owner: str, window: bytes, ttl_s: float) -> None:
        await self._publish(keys=[keys.replicas, keys.replica(owner)], args=[owner, window, ttl_s])
