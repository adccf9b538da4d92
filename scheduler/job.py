"""One request's life in the scheduler: a ``Job``, from admission to its last part's end.

The gateway asks ``Scheduler.admit`` for a job and then only tells it what happens,
one method per event it sees (as the simulator's engine and vLLM's ``Request`` do):

    start ─► (granted) ─► failed / back_off ─► (granted again) ─► ... ─► finish
                │                                                    ▲
                └─ watch ─► passed_quantum ─► pause ─► (granted) ────┘

The job owns what the request holds in the scheduler: its admission (prediction,
class, ticket), its quota hold, the current grant with its route (worked out once per
grant), its attempts, pauses and overload refusals, and its arrival. Each grant's
part ends exactly once (the slot goes back, the backend's health and speed are
reported, the reservation and the predictor learn, and a part that ends with the whole
answer's length is compared with the hint its key sent); the request ends exactly once
(its quota is settled).

The waits (``start``, ``failed``, ``back_off``, ``pause``) return a future of the next
grant: cancelling it withdraws the ticket, and a grant that arrives as it is cancelled
is given back.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from scheduler.backends.backend import BackendConfig
from scheduler.backends.registry import BackendRegistry
from scheduler.errors import BackendOverloaded, BackendsDown, DeadlineExceeded, NoBackend, SchedulerError
from scheduler.policy import backoff, order
from scheduler.policy.classify import Classifier
from scheduler.policy.hints import HintTrust
from scheduler.policy.preemption import candidate_after, is_candidate
from scheduler.policy.quota import CHARS_PER_TOKEN, QuotaLimits, reserve_tokens
from scheduler.queue.dispatcher import Dispatcher, Watch
from scheduler.quotas import Hold, Quotas
from scheduler.types import CallResult, Grant, Placement, PredictInput, RateLimits, ResumeMode, Ticket


@dataclass(frozen=True, slots=True)
class SchedulerParams:
    open_tier: str  # the most urgent tier: never restricted by reservation
    preempt: bool = False  # running generations may be paused for more urgent work
    quantum_tokens: int = 64  # output tokens a part makes before it may be paused
    no_backend_grace_s: float = 0.0  # every backend of a model down this long: refuse at once (503)
    overload_max_attempts: int = 20  # backend refusals (429/503) a request without a deadline may meet


@dataclass(frozen=True, slots=True)
class Shared:
    """What every job of one scheduler uses."""

    dispatcher: Dispatcher
    registry: BackendRegistry
    classifier: Classifier
    params: SchedulerParams
    quotas: Quotas | None  # None: no quota is configured anywhere
    hints: HintTrust


@dataclass(frozen=True, slots=True)
class Route:
    backend: BackendConfig
    priority: int | None  # for engines with their own priority queue, in the engine's direction


def all_down(model: str) -> BackendsDown:
    return BackendsDown(f"Every backend serving the model '{model}' is down; retry shortly.")


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What the gateway knows of a request besides what predicts its length."""

    request_id: str
    tier: str
    arrived: float  # time.monotonic() when it arrived: the starvation bound and deadlines count from it
    timeout_s: float  # how long it may wait in the queue; 0: no limit
    key_id: str = ""  # the API key's id, for its quotas ("" for the open gateway)
    key_quotas: QuotaLimits | None = None  # the key's own limits
    oracle_tokens: int | None = None  # the true length (the oracle policy only)


class Job:
    """One request in the scheduler; built by ``Scheduler.admit``."""

    def __init__(
        self, shared: Shared, request: JobRequest, pool: str, inp: PredictInput, placement: Placement,
        ticket: Ticket, claimed_hint: int | None,
    ) -> None:
        self._s = shared
        self.request = request
        self.pool = pool
        self.inp = inp  # what the predictor saw (its hint only if it was believed)
        self.placement = placement
        self.ticket = ticket  # the current ticket: a retry, a re-queue or a continuation has its own
        self.hold: Hold | None = None  # its share of its quotas, settled when it ends
        self.grant: Grant | None = None  # the slot it holds now
        self.route: Route | None = None  # where the current grant sends it
        self.overloads = 0  # times a backend refused it as overloaded (429/503)
        self.overload_status = 0  # the last such status
        self._claimed_hint = claimed_hint  # x-triage-expected-tokens from a key allowed to send it
        self._granted_at = 0.0
        self._ever_granted = False
        self._part_over = True  # the current grant's part has ended (or there is none)
        self._retried = False  # the current round of calls has used its one retry
        self._finished = False
        self.pause_reason = ""  # why its last pause was taken (wait=<s>,cost=<s>)

    # -- what it is --------------------------------------------------------------------
    @property
    def cls(self) -> str:
        return self.placement.cls.value

    @property
    def rate_limits(self) -> RateLimits | None:
        """The x-ratelimit numbers of its quotas, when any applies."""
        return self.hold.limits if self.hold is not None else None

    @property
    def may_pause(self) -> bool:
        """May its generation on the current grant be paused and resumed? (The gateway
        checks the request itself: one choice, a prompt that can carry the text so far.)"""
        assert self.route is not None
        return self._s.params.preempt and self.route.backend.resume is not ResumeMode.NONE

    # -- queueing ----------------------------------------------------------------------
    async def start(self) -> asyncio.Future[Grant]:
        """Charge its quotas (``QuotaExceeded``), then queue it: the future of its grant,
        already done when the enqueue's own reply granted it."""
        self.hold = await self._charge()
        return await self._queue()

    async def _charge(self) -> Hold | None:
        quotas = self._s.quotas
        if quotas is None:
            return None
        reserve = reserve_tokens(self.inp.prompt_chars, self.placement.prediction.tokens, self.inp.max_tokens)
        plan = quotas.plan(self.inp.tenant, self.request.key_id, self.request.key_quotas, reserve)
        return None if plan is None else await quotas.admit(plan, self.request.request_id)

    async def _queue(self) -> asyncio.Future[Grant]:
        """Enqueue the current ticket (one round trip): the future of its grant."""
        dispatcher, ticket, pool = self._s.dispatcher, self.ticket, self.pool
        future = await dispatcher.submit(ticket, pool)
        if future.done():  # granted in the enqueue's reply: nothing to wait for
            done: asyncio.Future[Grant] = asyncio.get_running_loop().create_future()
            try:
                done.set_result(self._take(await dispatcher.wait(ticket, pool, future)))
            except SchedulerError as exc:
                done.set_exception(exc)
            return done
        return self._waiting(dispatcher.wait(ticket, pool, future), lambda: dispatcher.abandon(ticket.id, pool, future))

    def _acquire(self) -> asyncio.Future[Grant]:
        return self._waiting(self._s.dispatcher.acquire(self.ticket, self.pool), None)

    def _waiting(self, wait: Coroutine[Any, Any, Grant], abandon: Callable[[], None] | None) -> asyncio.Future[Grant]:
        """``wait`` as a task whose result is taken as the job's grant. A task cancelled
        before its first step never runs its coroutine, nor the dispatcher's cleanup in it:
        then the ticket is withdrawn here (``abandon``), so a client that leaves at once
        leaks no slot."""
        granted = self._granted(wait)
        task = asyncio.ensure_future(granted)

        def cancelled_before_start(t: asyncio.Future[Grant]) -> None:
            if t.cancelled() and inspect.getcoroutinestate(granted) == inspect.CORO_CLOSED \
                    and inspect.getcoroutinestate(wait) == inspect.CORO_CREATED:
                wait.close()
                if abandon is not None:
                    abandon()

        task.add_done_callback(cancelled_before_start)
        return task

    async def _granted(self, waiting: Awaitable[Grant]) -> Grant:
        return self._take(await self._while_served(waiting))

    def _take(self, grant: Grant) -> Grant:
        self.grant, self.route = grant, self._route(grant)
        self._granted_at, self._ever_granted, self._part_over = time.monotonic(), True, False
        return grant

    async def position(self) -> int | None:
        """1-based place in the queue; None once it left it, or while Redis cannot say."""
        return await self._s.dispatcher.position(self.pool, self.ticket.id)

    def drain_rate(self) -> float:
        """Grants per second in its pool, recently (0: unknown)."""
        return self._s.dispatcher.drain_rate(self.pool)

    def explain(self, exc: SchedulerError) -> SchedulerError:
        """Why a wait ended, as the client should hear it: past its deadline after backends
        refused it as overloaded is their refusal; past its deadline while every backend of
        the model is down is ``BackendsDown``."""
        if isinstance(exc, DeadlineExceeded) and self.overloads:
            return BackendOverloaded(self.overload_status, self._s.registry.ready_in(self.inp.model))
        if isinstance(exc, DeadlineExceeded) and self._s.registry.down_for(self.inp.model) is not None:
            return all_down(self.inp.model)
        return exc

    # -- a call that did not go through ------------------------------------------------
    def failed(self) -> asyncio.Future[Grant] | None:
        """The call failed before its first byte: the future of a second attempt on
        another backend, at the front of the queue; None after one retry already, or when
        no other healthy backend serves the model (the client gets a 502)."""
        assert self.grant is not None
        failed = self.grant.backend
        self.end_part(CallResult.failed())
        if self._retried or not self._s.registry.alternatives(self.inp.model, failed):
            return None
        self._retried = True
        self.ticket = order.retry_order(self.ticket, failed)
        return self._acquire()

    async def back_off(self, status: int, cool_s: float) -> asyncio.Future[Grant]:
        """The backend refused the call as overloaded (429/503) before answering: it cools
        down for ``cool_s`` and gets no grants meanwhile, and the request queues again at
        the front with its arrival and what is left of its deadline. ``BackendOverloaded``
        when it cannot wait any longer."""
        assert self.grant is not None
        backend, registry, model = self.grant.backend, self._s.registry, self.inp.model
        self.end_part(CallResult(False, status))  # 429/503: the limit is cut, no breaker failure
        self.overloads += 1
        self.overload_status = status
        await registry.cool_down(backend, cool_s)
        age_s = time.monotonic() - self.request.arrived  # after the publish: the arrival stays exact
        left_s = backoff.deadline_left(self.request.timeout_s, age_s)
        if backoff.out_of_attempts(left_s, self.overloads, self._s.params.overload_max_attempts):
            raise BackendOverloaded(status, registry.ready_in(model))
        ready_in = registry.ready_in(model)
        if backoff.cannot_wait(left_s, ready_in):  # no backend of the model free before its deadline
            raise BackendOverloaded(status, ready_in if ready_in is not None else cool_s)
        self.ticket = order.requeue_order(self.ticket, self.overloads, age_s, left_s or 0.0)
        self._retried = False  # a new round of calls: its own retry
        return self._acquire()

    # -- pausing -----------------------------------------------------------------------
    def watch(self, progress: Callable[[], int | None], on_pause: Callable[[], None], tokens: int) -> int:
        """Its generation (``tokens`` output tokens so far) runs on the current grant and
        may be paused: ``progress`` tells how far it got (None: not now), ``on_pause`` runs
        if its slot is given to more urgent work. It is offered as a victim only once this
        part has made progress of its own — a quantum past ``tokens`` — so a part that has
        just resumed, and paid its re-read of the prompt, is not paused again at once. The
        output tokens past which it becomes a candidate (``passed_quantum`` is then to be
        told, once)."""
        assert self.grant is not None
        quantum = self._s.params.quantum_tokens

        def candidate() -> int | None:
            n = progress()
            return n if n is not None and is_candidate(n, tokens, quantum) else None

        def paused(reason: str) -> None:
            self.pause_reason = reason
            on_pause()

        prompt = math.ceil(self.inp.prompt_chars / CHARS_PER_TOKEN)
        self._s.dispatcher.watch(self.grant, Watch(candidate, paused, prompt))
        return candidate_after(tokens, quantum)

    def passed_quantum(self, tokens: int) -> None:
        """Its generation just became a candidate for a pause: say so now, not at the next heartbeat."""
        assert self.grant is not None
        self._s.dispatcher.report_progress(self.grant, tokens)

    async def pause(self) -> asyncio.Future[Grant]:
        """Its slot went to more urgent work and its stream is closed: the part ends (the
        backend not blamed, nothing learned) and its continuation queues with the
        request's original arrival; the future of the continuation's grant."""
        self.end_part(CallResult.client_gone())
        self.ticket = order.continuation_order(
            self.ticket, time.monotonic() - self.request.arrived, self.request.request_id
        )
        self._retried = False
        return await self._queue()

    # -- ending ------------------------------------------------------------------------
    def end_part(self, result: CallResult) -> None:
        """The current grant's call ended: its slot goes back, the backend's health and
        speed are reported, the reservation and the predictor learn; a whole answer's
        length (``result.tokens``: only the last part of a request has one) is compared
        with the hint its key sent. Once per grant."""
        if self._part_over or self.grant is None:
            return
        self._part_over = True
        self._complete(self.grant, result, time.monotonic() - self._granted_at)
        if result.tokens is not None and self._claimed_hint is not None:
            self._s.hints.observe(self.inp.tenant, self._claimed_hint, result.tokens)

    def finish(self, result: CallResult, usage: dict[str, int] | None) -> None:
        """The request is over: its last part ends with ``result`` (unless it has already
        ended), and its quotas learn what it really used (``usage``; unknown: nothing if it
        never reached a backend, else the reservation stands). Once."""
        self.end_part(result)
        if self._finished:
            return
        self._finished = True
        if self.hold is None:
            return
        if usage and isinstance(usage.get("prompt_tokens"), int):
            real: int | None = usage["prompt_tokens"] + int(usage.get("completion_tokens") or 0)
        else:
            real = None if self._ever_granted else 0
        self.hold.settle(real)


    # -- what every grant goes through --------------------------------------------------
    def _route(self, grant: Grant) -> Route:
        """Which backend config the grant sends it to, and the priority an engine with its
        own queue is told (the current ticket's order, in the engine's direction)."""
        backend = self._s.registry.config_of(grant.backend)
        if not backend.engine_priority:
            return Route(backend, None)
        return Route(backend, self._s.registry.priority_for(backend.name, order.engine_priority(self.ticket)))

    async def _while_served(self, waiting: Awaitable[Grant]) -> Grant:
        """Wait for the grant while a backend may still serve the request: once every
        backend of its model has been down for the grace (or a reload removed the last
        one), the ticket is withdrawn and the wait ends in ``BackendsDown`` (``NoBackend``),
        at once rather than at the request's deadline. Woken only while no backend is up, at
        each probe round."""
        model, registry = self.inp.model, self._s.registry
        work = asyncio.ensure_future(waiting)
        try:
            while not work.done():
                await asyncio.wait({work, registry.unserved(model)}, return_when=asyncio.FIRST_COMPLETED)
                if work.done():
                    break
                refusal = self._unservable()
                if refusal is not None:
                    work.cancel()  # withdraws the ticket; a grant already in flight is released
                    with contextlib.suppress(asyncio.CancelledError):
                        return await work  # granted after all: serve it
                    raise refusal
            return work.result()
        except BaseException:
            # our own wait was cancelled (the client left), or it failed: withdraw the ticket,
            # or give back the grant that came just as we were cancelled
            if work.done() and not work.cancelled() and work.exception() is None:
                self._s.dispatcher.release_soon(work.result())
            else:
                work.cancel()
            raise

    def _unservable(self) -> NoBackend | None:
        model = self.inp.model
        if self._s.registry.pool_of(model) is None:
            return NoBackend(f"No backend serves the model '{model}' any more.")
        down_for = self._s.registry.down_for(model)
        if down_for is not None and down_for >= self._s.params.no_backend_grace_s:
            return all_down(model)
        return None

    def _complete(self, grant: Grant, result: CallResult, service_s: float) -> None:
        """Release the slot, report the backend's health and speed, learn the length."""
        self._s.dispatcher.release_soon(grant)
        self._s.registry.report(grant.backend, result.ok, result.overloaded, result.ttft_s, result.tpot_s)
        reservation = self._s.registry.reservations[self.pool]
        if self.ticket.restricted:
            reservation.on_restricted_done(service_s)
        else:
            reservation.on_open_done(service_s)
        # Replies cut at max_tokens are learned too: leaving them out would teach the
        # model only the replies that ended early, biasing it low; the cap is a feature,
        # so what a cut reply teaches lands mostly on the cap, not on the text.
        if result.tokens is not None and result.ok:
            self._s.classifier.learn(self.inp, result.tokens)
