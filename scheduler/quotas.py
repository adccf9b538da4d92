"""Quotas as mechanism: admit against a tenant's and a key's limits, settle at the end.

    admit ─► (the request runs) ─► Hold.settle(real tokens)        renew: while it runs

``admit`` runs ``quota.lua`` once: every limit of both scopes is checked and, only if
all pass, all are charged — one atomic step in Redis, shared by every replica. The
tokens a request will use are known only at its end, so it reserves an estimate
(``policy.quota.reserve_tokens``) and ``Hold.settle`` replaces it with the real count
(``quota_settle.lua``). A request counts as running (``concurrent``) until it settles;
its entry expires unless its replica renews it, so a replica that dies gives its
share back after ``hold_s``. What the limits are is policy (``policy/quota.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.exceptions import RedisError

from scheduler import tasks
from scheduler.errors import QuotaExceeded, SchedulerUnavailable
from scheduler.policy.quota import QuotaLimits, QuotaPlan
from scheduler.policy.quota import plan as make_plan
from scheduler.queue.keys import QuotaKeys
from scheduler.queue.scripts import QuotaResult, QuotaScripts, ScopeLimits, ScopeState
from scheduler.types import RateLimits

log = logging.getLogger(__name__)


def _limits(q: QuotaLimits) -> ScopeLimits:
    return ScopeLimits(q.requests_per_minute or 0, q.tokens_per_minute or 0, q.concurrent or 0)


def rate_limits(scopes: tuple[ScopeState, ScopeState]) -> RateLimits:
    """Per kind, the scope with the least left (the one a client runs into first)."""
    req = [(s.requests_limit, s.requests_remaining, s.requests_reset_s) for s in scopes if s.requests_limit]
    tok = [(s.tokens_limit, s.tokens_remaining, s.tokens_reset_s) for s in scopes if s.tokens_limit]
    return RateLimits(
        min(req, key=lambda v: v[1]) if req else None, min(tok, key=lambda v: v[1]) if tok else None
    )


@dataclass(slots=True)
class Hold:
    """One admitted request's share of its quotas, until ``settle``."""

    quotas: Quotas
    plan: QuotaPlan
    request_id: str
    keys: QuotaKeys
    limits: RateLimits
    settled: bool = False

    def settle(self, real_tokens: int | None) -> None:
        """The request ended: ``real_tokens`` (input + output) replaces the reservation;
        ``None``: unknown, the reservation stands. Once; the Redis call runs in the background."""
        if self.settled:
            return
        self.settled = True
        self.quotas.settle(self, real_tokens)


@dataclass
class Quotas:
    redis: Redis
    prefix: str
    defaults: QuotaLimits = field(default_factory=QuotaLimits)  # a tenant without its own entry
    tenants: dict[str, QuotaLimits] = field(default_factory=dict)
    hold_s: float = 30.0  # a running entry's life unless renewed
    renew_s: float = 2.0
    _scripts: QuotaScripts = field(init=False)
    _running: dict[str, Hold] = field(default_factory=dict, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _renewing: tasks.Periodic = field(init=False)

    def __post_init__(self) -> None:
        self._scripts = QuotaScripts(self.redis)
        self._renewing = tasks.Periodic(self.renew_s, self.renew, "quota renew", log=log)

    def plan(self, tenant: str, key_id: str, key_limits: QuotaLimits | None, reserve: int) -> QuotaPlan | None:
        """What to check for one request (``policy.quota.plan``); None: no limit applies."""
        return make_plan(tenant, key_id, self.defaults, self.tenants, key_limits, reserve)

    async def admit(self, plan: QuotaPlan, request_id: str) -> Hold:
        """Charge the request against its limits, or raise ``QuotaExceeded``."""
        keys = QuotaKeys(self.prefix, plan.tenant, plan.key_id or "-")
        try:
            result = await self._scripts.admit(
                keys, request_id, plan.reserve_tokens, self.hold_s, _limits(plan.tenant_limits),
                _limits(plan.key_limits),
            )
        except RedisError as exc:
            raise SchedulerUnavailable(f"The quota store cannot be reached: {exc}") from None
        limits = rate_limits(result.scopes)
        if result.allowed != 1:
            raise QuotaExceeded(_message(plan, result), result.retry_after_s if result.allowed == 0 else None,
                                limits, result.failed_limit)
        hold = Hold(self, plan, request_id, keys, limits)
        self._running[request_id] = hold
        return hold

    def settle(self, hold: Hold, real_tokens: int | None) -> None:
        self._running.pop(hold.request_id, None)
        delta = 0 if real_tokens is None else real_tokens - hold.plan.reserve_tokens
        task = asyncio.get_running_loop().create_task(self._settle(hold, delta))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle(self, hold: Hold, delta: int) -> None:
        p = hold.plan
        try:
            await self._scripts.settle(
                hold.keys, hold.request_id, delta, p.tenant_limits.tokens_per_minute or 0,
                p.key_limits.tokens_per_minute or 0,
            )
        except RedisError as exc:  # its running entry expires after hold_s; the token difference is lost
            log.warning("quota settle for %s failed: %s", hold.request_id, exc)

    async def start(self) -> None:
        self._renewing.start()

    async def stop(self) -> None:
        await self._renewing.stop()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def renew(self) -> None:
        """Push the expiry of every request of this replica that still runs forward."""
        by_tenant: dict[str, tuple[set[str], list[str]]] = defaultdict(lambda: (set(), []))
        for hold in list(self._running.values()):
            keys, ids = by_tenant[hold.plan.tenant]
            keys.update((hold.keys.tenant_running, hold.keys.key_running))
            ids.append(hold.request_id)
        for keys, ids in by_tenant.values():
            await self._scripts.renew(sorted(keys), self.hold_s, ids)


def _message(plan: QuotaPlan, result: QuotaResult) -> str:
    scope = f"tenant '{plan.tenant}'" if result.failed_scope == 1 else f"key '{plan.key_id}'"
    limits = plan.tenant_limits if result.failed_scope == 1 else plan.key_limits
    if result.allowed == -1:
        return (f"Request too large for {scope}: it reserves {plan.reserve_tokens} tokens, the limit is "
                f"{limits.tokens_per_minute} tokens per minute. Send a smaller prompt or max_tokens.")
    if result.failed_limit == "concurrent":
        return f"Rate limit reached for {scope}: {limits.concurrent} concurrent requests. Try again shortly."
    if result.failed_limit == "tokens":
        return (f"Rate limit reached for {scope}: {limits.tokens_per_minute} tokens per minute "
                f"(this request reserves {plan.reserve_tokens}). Try again in {result.retry_after_s:.2f} s.")
    return (f"Rate limit reached for {scope}: {limits.requests_per_minute} requests per minute. "
            f"Try again in {result.retry_after_s:.2f} s.")
