"""The replica's side of the shared queue: enqueue, wait for a grant, release.

Ownership: a ticket in Redis belongs to the replica that holds its client's
connection (its *owner*). Grants for it are pushed to the owner's inbox, except
grants made by the owner's own script call, which come back in that call's reply
(no extra round trip). One task per pool blocks on the inbox (BLPOP) and wakes the
waiting request; one heartbeat task renews this replica's leases, proves it alive
and re-queues tickets that a Redis restart lost.

Round trips on the common path: enqueue-and-dispatch (1), the grant (0 when granted
at once, else the BLPOP already waiting), release-and-dispatch (1, off the response path).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from scheduler import tasks
from scheduler.errors import DeadlineExceeded, QueueFull, SchedulerUnavailable, Shed
from scheduler.queue.drain_rate import DrainRate
from scheduler.queue.keys import PoolKeys
from scheduler.queue.readback import backend_states
from scheduler.queue.records import GrantMessage, PauseMessage, pack_lease, pack_progress, parse_message
from scheduler.queue.scripts import Scripts
from scheduler.types import BackendRecord, Grant, Message, MessageKind, Ticket

log = logging.getLogger("triage.dispatcher")


@dataclass(frozen=True, slots=True)
class QueueLimits:
    max_queue: int = 10_000  # per pool; 0: unbounded
    max_tenant_queue: int = 0  # per tenant and pool; 0: unbounded


@dataclass(frozen=True, slots=True)
class Watch:
    """A running lease that may be paused: how far it got, and what to do when it is."""

    progress: Callable[[], int | None]  # output tokens so far; None: not preemptible now
    on_pause: Callable[[str], None]  # its slot went to a more urgent ticket (why: wait=..,cost=..)
    prompt: int = 0  # its prompt's tokens (what a resume re-reads besides the output)


@dataclass(slots=True)
class _Waiter:
    spec: Ticket
    pool: str
    future: asyncio.Future[Grant]
    started: float


def _eviction(reason: str) -> Exception:
    if reason == "shed":
        return Shed("the queue is full and this request was shed for more urgent work; retry later")
    return DeadlineExceeded("request waited past its deadline in the queue")


class Dispatcher:
    def __init__(
        self,
        redis: Redis,
        listen_redis: Redis,
        scripts: Scripts,
        *,
        prefix: str,
        owner: str,
        pools: Iterable[str],
        limits: QueueLimits,
        heartbeat_s: float,
    ) -> None:
        self._redis = redis
        self._listen = listen_redis  # BLPOP holds a connection: keep it off the shared pool
        self._scripts = scripts
        self._prefix = prefix
        self.owner = owner
        self._keys = {p: PoolKeys(prefix, p) for p in pools}
        self._limits = limits
        self._waiters: dict[str, _Waiter] = {}
        self._held: dict[str, dict[str, str]] = {p: {} for p in self._keys}  # pool -> lease -> record
        self.quiet: dict[str, bool] = {p: False for p in self._keys}  # no open work expected
        self._epochs: dict[str, str] = {}  # pool -> the Redis epoch last seen
        self._unreleased: dict[str, set[str]] = {p: set() for p in self._keys}  # releases that failed
        self._drain = {p: DrainRate() for p in self._keys}
        self._watched: dict[str, Watch] = {}  # lease -> how to follow and pause it
        self._tasks: set[asyncio.Task[None]] = set()
        self._heartbeats = tasks.Periodic(heartbeat_s, self._heartbeat_all, "heartbeat", at_once=True, log=log)
        self._loops: list[asyncio.Task[None]] = []

    # -- lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        for pool in self._keys:
            self._loops.append(asyncio.create_task(self._listen_inbox(pool), name=f"inbox-{pool}"))
        self._heartbeats.start()

    async def stop(self) -> None:
        await self._heartbeats.stop()
        await tasks.stop(self._loops)
        self._loops.clear()
        for pool, held in self._held.items():  # leases nothing released (a stream cut at exit)
            for lease, record in list(held.items()):
                held.pop(lease, None)
                self._spawn(self._release(pool, lease, record))
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)

    async def hand_back(self, error: Callable[[], Exception]) -> int:
        """Withdraw every ticket this replica still has queued and fail its request with
        ``error()`` (the replica drains: its clients retry on another). A ticket granted
        meanwhile keeps its grant and runs. Returns how many were handed back."""
        handed = 0
        for ticket, waiter in list(self._waiters.items()):
            if waiter.future.done():
                continue
            if await self._withdraw(ticket, waiter.pool) and not waiter.future.done():
                waiter.future.set_exception(error())
                handed += 1
        return handed
    def add_pool(self, pool: str) -> None:
        """A pool named by a reloaded config: its keys, its inbox task, its heartbeat."""
        if pool in self._keys:
            return
        self._keys[pool] = PoolKeys(self._prefix, pool)
        self._held[pool], self.quiet[pool], self._unreleased[pool] = {}, False, set()
        self._drain[pool] = DrainRate()
        if self._loops:  # started: listen at once
            self._loops.append(asyncio.create_task(self._listen_inbox(pool), name=f"inbox-{pool}"))

    @property
    def queued_here(self) -> int:
        return len(self._waiters)

    def held(self, pool: str) -> dict[str, str]:
        return dict(self._held[pool])

    # -- the request path ----------------------------------------------------------
    async def acquire(self, spec: Ticket, pool: str) -> Grant:
        future = await self.submit(spec, pool)
        return await self.wait(spec, pool, future)

    async def submit(self, spec: Ticket, pool: str) -> asyncio.Future[Grant]:
        """Enqueue (one round trip). The future is already done when the script's own
        reply decided the ticket; otherwise ``wait`` for it."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(spec, pool, loop.create_future(), time.monotonic())
        self._waiters[spec.id] = waiter
        try:
            await self._enqueue(waiter)
        except BaseException:
            self._waiters.pop(spec.id, None)
            raise
        return waiter.future

    async def wait(self, spec: Ticket, pool: str, future: asyncio.Future[Grant]) -> Grant:
        """The grant for a submitted ticket; cancelling the wait withdraws the ticket."""
        if future.done() and not future.cancelled() and future.exception() is None:
            return future.result()  # granted in the enqueue's reply
        try:
            if spec.timeout_s > 0:
                # Lua evicts expired tickets when it meets them; this timer covers a queue
                # that nothing moves. A little grace lets the server's eviction win the race.
                async with asyncio.timeout(spec.timeout_s + 0.25):
                    return await asyncio.shield(future)
            return await asyncio.shield(future)
        except TimeoutError:
            if await self._withdraw(spec.id, pool):
                raise DeadlineExceeded(
                    f"request waited {spec.timeout_s:.1f}s in the queue without a free backend"
                ) from None
            return await future  # granted in the meantime: the grant is on its way
        except BaseException:
            # the client left (cancelled) or the wait failed: never leak its slot
            self.abandon(spec.id, pool, future)
            raise

    def release_soon(self, grant: Grant) -> None:
        """Give the slot back without holding up the response (safe inside a cancelled task)."""
        record = self._held[grant.pool].pop(grant.ticket, None)
        self._watched.pop(grant.ticket, None)
        self._spawn(self._release(grant.pool, grant.ticket, record or ""))

    def watch(self, grant: Grant, watch: Watch) -> None:
        """Report this lease's progress with each heartbeat, so the dispatch script may
        pause it for more urgent work; ``watch.on_pause`` runs if it does."""
        self._watched[grant.ticket] = watch

    def report_progress(self, grant: Grant, tokens: int) -> None:
        """Report a watched lease's progress now, not at the next heartbeat (it just became
        a candidate: past its quantum). One field of one hash; a report that lands after
        the release is dropped by the next dispatch that meets it."""

        async def report(packed: str) -> None:
            try:
                await self._redis.hset(self._keys[grant.pool].progress, grant.ticket, packed)
            except RedisError as exc:
                log.warning("progress of %s: %s", grant.ticket, exc)

        if (watched := self._watched.get(grant.ticket)) is not None:
            self._spawn(report(pack_progress(tokens, watched.prompt)))

    async def publish_backend(self, pool: str, backend: BackendRecord) -> None:
        """Register or update a backend in Redis; freed capacity is granted at once."""
        messages = await self._scripts.set_backend(self._keys[pool], self.owner, backend)
        self._deliver(pool, messages)

    # -- internals -----------------------------------------------------------------
    async def _enqueue(self, waiter: _Waiter) -> None:
        keys = self._keys[waiter.pool]
        try:
            result = await self._scripts.enqueue(
                keys, self.owner, waiter.spec, self._limits.max_queue, self._limits.max_tenant_queue
            )
        except RedisError as exc:
            log.warning("enqueue failed: %s", exc)  # the detail (addresses) stays in the log
            raise SchedulerUnavailable(
                "the gateway's queue store (Redis) cannot be reached; retry shortly"
            ) from exc
        if result.status == -1:
            raise QueueFull(
                f"the queue for this model is full ({result.queue_len} waiting)",
                self._retry_after(waiter.pool, result.queue_len),
            )
        if result.status == -2:
            raise QueueFull(
                f"tenant '{waiter.spec.tenant}' has too many requests queued",
                self._retry_after(waiter.pool, result.queue_len),
            )
        self._deliver(waiter.pool, result.messages)

    async def occupancy(self, pool: str) -> tuple[dict[str, int], dict[str, int]]:
        """Leases held per backend, and how many of them are borrowed, by all replicas."""
        states = await backend_states(self._redis, self._keys[pool])
        return {n: b.busy for n, b in states.items()}, {n: b.borrowed for n, b in states.items()}

    async def replicas(self, pool: str) -> int:
        """Replicas whose heartbeat is current (on Redis's clock), this one included."""
        seconds, micros = await self._redis.time()
        live = await self._redis.zcount(self._keys[pool].owners, seconds + micros / 1e6, "+inf")
        return max(1, int(live))

    def drain_rate(self, pool: str) -> float:
        """Tickets granted per second in the pool, by all replicas, recently."""
        return self._drain[pool].rate

    async def position(self, pool: str, ticket: str) -> int | None:
        """1-based place of a queued ticket; None once it left the queue, or while Redis
        cannot say (the ticket is still waited for: it is queued again when Redis is back)."""
        try:
            rank: int | None = await self._redis.zrank(self._keys[pool].queue, ticket)  # type: ignore[assignment]
        except RedisError:
            return None
        return None if rank is None else rank + 1

    def _retry_after(self, pool: str, queue_len: int) -> float:
        """Seconds until a tenth of the queue has drained, from the recent grant rate."""
        rate = self._drain[pool].rate
        if rate <= 0:
            return 5.0
        return float(min(120, max(1, math.ceil(queue_len / rate / 10))))

    def _deliver(self, pool: str, messages: list[Message]) -> None:
        for msg in messages:
            if msg.kind is MessageKind.GRANT and msg.ticket in self._held[pool]:
                continue  # told twice (a retried call's answer and the inbox): one lease
            if msg.kind is MessageKind.PAUSE:
                # the script already gave its slot away: no lease to renew or release
                held = self._held[pool].pop(msg.ticket, None)
                watched = self._watched.pop(msg.ticket, None)
                if watched is not None:
                    watched.on_pause(msg.reason if isinstance(msg, PauseMessage) else "")
                elif held is not None:  # (not held: released meanwhile, its generation over)
                    log.warning("lease %s was paused, but this replica does not follow its generation: "
                                "it runs on beside the work its slot went to", msg.ticket)
                continue
            if msg.kind is MessageKind.LOST:
                lost = self._waiters.get(msg.ticket)
                if lost is not None:  # still waited for: queue it again
                    self._spawn(self._requeue(lost))
                continue
            waiter = self._waiters.pop(msg.ticket, None)
            if isinstance(msg, GrantMessage):
                # the lease as the script recorded it, whole: the heartbeat writes it back
                # if Redis loses it, and a pause decision reads all of it
                self._held[pool][msg.ticket] = pack_lease(msg.lease)
                if waiter is None or waiter.future.done():
                    # its client left while the grant was on its way
                    self.release_soon(Grant(msg.ticket, pool, msg.detail, 0.0))
                    continue
                grant = Grant(msg.ticket, pool, msg.detail, time.monotonic() - waiter.started)
                waiter.future.set_result(grant)
            elif msg.kind is MessageKind.EVICT and waiter is not None and not waiter.future.done():
                waiter.future.set_exception(_eviction(msg.detail))

    async def _withdraw(self, ticket: str, pool: str) -> bool:
        """Take a ticket out of the queue; False if it was already granted."""
        try:
            removed = await self._scripts.cancel(self._keys[pool], ticket)
        except RedisError:
            removed = True  # Redis is gone and the ticket with it (or it is dropped when met)
        if removed:
            self._waiters.pop(ticket, None)
        return removed

    def abandon(self, ticket: str, pool: str, future: asyncio.Future[Grant]) -> None:
        """Nobody waits for this ticket any more: withdraw it, or give back its grant."""
        self._waiters.pop(ticket, None)
        if future.done() and not future.cancelled() and future.exception() is None:
            self.release_soon(future.result())
            return
        future.cancel()
        # withdrawn: done. Not withdrawn: the grant is in flight and _deliver releases it.
        self._spawn(self._withdraw(ticket, pool))

    async def _release(self, pool: str, lease: str, record: str = "") -> None:
        try:
            messages = await self._scripts.release(self._keys[pool], self.owner, lease, record)
        except RedisError as exc:
            # releasing is idempotent: the heartbeat tries again until Redis answers
            log.warning("release of %s failed (%s); will retry", lease, exc)
            self._unreleased[pool].add(lease)
            return
        self._deliver(pool, messages)

    def _spawn(self, coro: Coroutine[object, None, object]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _listen_inbox(self, pool: str) -> None:
        key = self._keys[pool].inbox(self.owner)
        while True:
            try:
                item = await self._listen.blpop([key], timeout=1)
            except RedisError as exc:
                log.warning("inbox %s: %s; retrying", key, exc)
                await asyncio.sleep(0.5)
                continue
            if item is not None:
                try:
                    self._deliver(pool, [parse_message(item[1])])
                except Exception:  # noqa: BLE001 - one bad message must not end the listener
                    log.exception("inbox %s: a message could not be delivered", key)

    async def _heartbeat_all(self) -> None:
        for pool in list(self._keys):  # a reload may add a pool meanwhile
            try:
                await self.heartbeat(pool)
            except RedisError as exc:  # one pool's failure must not skip the others
                log.warning("heartbeat for pool %s failed: %s", pool, exc)
            except Exception:  # noqa: BLE001 - a loop that died would leave the replica looking dead
                log.exception("heartbeat for pool %s failed", pool)

    async def heartbeat(self, pool: str) -> None:
        keys = self._keys[pool]
        sent = dict(self._held[pool])
        waiting = [t for t, w in self._waiters.items() if w.pool == pool]
        progress = {
            lease: (n, w.prompt) for lease in sent if (w := self._watched.get(lease)) and (n := w.progress()) is not None
        }
        epoch, granted, messages = await self._scripts.heartbeat(
            keys, self.owner, sent, self.quiet[pool], waiting, progress
        )
        self._drain[pool].observe(time.monotonic(), granted)
        self._deliver(pool, messages)
        fresh = self._epochs.get(pool, epoch) != epoch
        self._epochs[pool] = epoch
        # a lease released while this heartbeat was on the wire may have been recreated;
        # a release that failed is tried again
        retry = (sent.keys() - self._held[pool].keys()) | self._unreleased[pool]
        self._unreleased[pool] = set()
        for lease in retry:
            self._spawn(self._release(pool, lease))
        if fresh:
            await self._requeue_lost(pool)

    async def _requeue_lost(self, pool: str) -> None:
        """Redis came back empty: queue our waiters again (their tickets were lost)."""
        for waiter in [w for w in self._waiters.values() if w.pool == pool]:
            await self._requeue(waiter)

    async def _requeue(self, waiter: _Waiter) -> None:
        """Queue a waiter's lost ticket again (same id: a retried enqueue is a no-op)."""
        if waiter.future.done() or self._waiters.get(waiter.spec.id) is not waiter:
            return  # granted or gone meanwhile
        try:
            await self._enqueue(waiter)
        except Exception as exc:  # noqa: BLE001 - each waiter gets its own error
            self._waiters.pop(waiter.spec.id, None)
            if not waiter.future.done():
                waiter.future.set_exception(exc)
