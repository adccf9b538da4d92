"""The scheduler as the gateway sees it: one object, asked in the order a request goes.

    admit ─► submit ─► wait ─► route ─► complete        (retry: once, after a failed call)

- ``admit``: the request's place — prediction, class, queue order — and the rules
  that follow from it (restricted work; reservation bookkeeping). Unknown model:
  ``NoBackend``.
- ``submit`` / ``wait`` / ``acquire``: the shared queue (``queue.dispatcher``); the
  ``SchedulerError`` subclasses say why a request was refused or evicted.
- ``route``: which backend config to call, and the priority an engine with its own
  queue is told.
- ``retry``: the ticket for a second attempt, on another backend, at the front of the
  queue; ``None`` when no other healthy backend serves the model.
- ``back_off``: a backend refused the call as overloaded (429/503): it cools down, and
  the request goes back to the front of the queue with what is left of its deadline.
- ``watch`` / ``continuation``: with preemption on, a running generation that may be
  paused reports its progress; once paused, its continuation is queued again with the
  request's original arrival (``policy/preemption.py`` has the rule).
- ``complete``: the slot goes back, the backend's health and speed are reported, the
  reservation learns the service time and the predictor the length. Once per grant.

The gateway (``gateway/proxy.py``) keeps only the order of these steps and the HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from scheduler.backends.backend import BackendConfig
from scheduler.backends.registry import BackendRegistry
from scheduler.errors import BackendsDown, DeadlineExceeded, NoBackend, SchedulerError
from scheduler.policy.classify import Classifier
from scheduler.policy.order import engine_priority, requeue_order, retry_order
from scheduler.queue.dispatcher import Dispatcher, Watch
from scheduler.types import CallResult, Grant, LengthClass, Placement, PredictInput, Ticket


@dataclass(frozen=True, slots=True)
class Admission:
    """A request the scheduler has placed: what it was asked, and what it decided."""

    pool: str
    inp: PredictInput
    placement: Placement
    ticket: Ticket


@dataclass(frozen=True, slots=True)
class Route:
    backend: BackendConfig
    priority: int | None  # for engines with their own priority queue, in the engine's direction


class Scheduler:
    def __init__(
        self, dispatcher: Dispatcher, registry: BackendRegistry, classifier: Classifier, open_tier: str,
        preempt: bool = False, quantum_tokens: int = 64, no_backend_grace_s: float = 0.0,
    ) -> None:
        self.dispatcher = dispatcher
        self.registry = registry
        self.classifier = classifier
        self._open_tier = open_tier  # the most urgent tier: never restricted by reservation
        self.preempt = preempt  # running generations may be paused for more urgent work
        self.quantum_tokens = quantum_tokens  # output tokens before a generation may be paused
        # every backend of a model down (circuit open) this long: refuse at once (503)
        self.no_backend_grace_s = no_backend_grace_s

    async def admit(
        self, inp: PredictInput, tier: str, timeout_s: float, request_id: str, oracle_tokens: int | None = None,
    ) -> Admission:
        pool = self.registry.pool_of(inp.model)
        if pool is None:
            raise NoBackend(f"The model '{inp.model}' does not exist or no backend serves it.")
        down_for = self.registry.down_for(inp.model)
        if down_for is not None:
            if down_for >= self.no_backend_grace_s:
                raise self._all_down(inp.model)
            # a breaker may close soon: wait for it, but no longer than the grace
            left = self.no_backend_grace_s - down_for
            timeout_s = min(timeout_s, left) if timeout_s > 0 else left
        if self.classifier.blocking:  # a neural predictor: keep the event loop free
            placement = await asyncio.to_thread(self.classifier.place, inp, tier, oracle_tokens)
        else:
            placement = self.classifier.place(inp, tier, oracle_tokens)
        # restricted work may hold only its share of a backend (reservation)
        restricted = placement.cls is LengthClass.LONG or tier != self._open_tier
        ticket = Ticket(
            id=request_id, model=inp.model, tenant=inp.tenant, cls=placement.cls.value,
            predicted=int(placement.prediction.tokens), timeout_s=timeout_s, tier=tier,
            slack_s=placement.order.slack_s, tier_offset_s=placement.order.tier_offset_s,
            cost_s=placement.order.cost_s, restricted=restricted,
        )
        reservation = self.registry.reservations[pool]
        if restricted:
            reservation.on_restricted_arrival()
        else:
            reservation.on_open_arrival()
        return Admission(pool, inp, placement, ticket)

    # -- the queue ---------------------------------------------------------------------
    async def submit(self, adm: Admission) -> asyncio.Future[Grant]:
        """Enqueue (one round trip); the future is already done when the enqueue's own
        reply granted it."""
        return await self.dispatcher.submit(adm.ticket, adm.pool)

    async def wait(self, adm: Admission, future: asyncio.Future[Grant]) -> Grant:
        """The grant; cancelling the wait withdraws the ticket."""
        if future.done():  # decided in the enqueue's reply: nothing to wait for
            return await self.dispatcher.wait(adm.ticket, adm.pool, future)
        return await self._while_served(adm, self.dispatcher.wait(adm.ticket, adm.pool, future))

    async def acquire(self, adm: Admission) -> Grant:
        return await self._while_served(adm, self.dispatcher.acquire(adm.ticket, adm.pool))

    async def _while_served(self, adm: Admission, waiting: Awaitable[Grant]) -> Grant:
        """Wait for the grant while a backend may still serve the request: once every
        backend of its model has been down for the grace (or a reload removed the last
        one), the ticket is withdrawn and the wait ends in ``BackendsDown`` (``NoBackend``),
        at once rather than at the request's deadline. Woken only while no backend is up, at
        each probe round."""
        model = adm.inp.model
        work = asyncio.ensure_future(waiting)
        try:
            while not work.done():
                await asyncio.wait({work, self.registry.unserved(model)}, return_when=asyncio.FIRST_COMPLETED)
                if work.done():
                    break
                refusal = self._unservable(model)
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
                self.dispatcher.release_soon(work.result())
            else:
                work.cancel()
            raise

    def _unservable(self, model: str) -> NoBackend | None:
        if self.registry.pool_of(model) is None:
            return NoBackend(f"No backend serves the model '{model}' any more.")
        down_for = self.registry.down_for(model)
        if down_for is not None and down_for >= self.no_backend_grace_s:
            return self._all_down(model)
        return None

    async def position(self, adm: Admission) -> int | None:
        """1-based place in the queue; None once it left it, or while Redis cannot say."""
        return await self.dispatcher.position(adm.pool, adm.ticket.id)

    def drain_rate(self, adm: Admission) -> float:
        """Grants per second in the request's pool, recently (0: unknown)."""
        return self.dispatcher.drain_rate(adm.pool)

    # -- the backend -------------------------------------------------------------------
    def route(self, adm: Admission, grant: Grant) -> Route:
        backend = self.registry.config_of(grant.backend)
        if not backend.engine_priority:
            return Route(backend, None)
        return Route(backend, self.registry.priority_for(backend.name, engine_priority(adm.ticket)))

    def retry(self, adm: Admission, failed: str) -> Admission | None:
        """A second attempt after ``failed`` broke before answering; None if no other
        healthy backend serves the model."""
        if not self.registry.alternatives(adm.inp.model, failed):
            return None
        return dataclasses.replace(adm, ticket=retry_order(adm.ticket, failed))

    async def back_off(self, adm: Admission, backend: str, cool_s: float, age_s: float, left_s: float | None,
                       attempt: int) -> Admission | None:
        """``backend`` refused the call as overloaded: it gets no grants for ``cool_s``,
        and the request is queued again at the front with its arrival (``age_s`` ago)
        and ``left_s`` of its deadline (None: no deadline). None when no backend of the
        model can take it before that deadline (``ready_in`` says when one can)."""
        await self.registry.cool_down(backend, cool_s)
        ready_in = self.registry.ready_in(adm.inp.model)
        if ready_in is None or (left_s is not None and ready_in >= left_s):
            return None
        ticket = requeue_order(adm.ticket, attempt, age_s, left_s or 0.0)
        return dataclasses.replace(adm, ticket=ticket)

    def _all_down(self, model: str) -> BackendsDown:
        return BackendsDown(f"Every backend serving the model '{model}' is down; retry shortly.")

    def explain(self, adm: Admission, exc: SchedulerError) -> SchedulerError:
        """Why a wait ended: past its deadline while every backend of the model is down
        (the grace ran out) is ``BackendsDown`` (503 backends_down), not a queue timeout."""
        if isinstance(exc, DeadlineExceeded) and self.registry.down_for(adm.inp.model) is not None:
            return self._all_down(adm.inp.model)
        return exc

    def ready_in(self, model: str) -> float | None:
        """How soon a backend of the model may take work (None: none is healthy)."""
        return self.registry.ready_in(model)

    def may_pause(self, route: Route) -> bool:
        """May a streamed generation on this backend be paused and resumed? (The caller
        checks the request itself: one choice, no tool call so far.)"""
        return self.preempt and route.backend.resume

    def watch(self, grant: Grant, progress: Callable[[], int | None], on_pause: Callable[[], None]) -> None:
        """Report a running generation's progress; ``on_pause`` runs if its slot is taken."""
        self.dispatcher.watch(grant, Watch(progress, on_pause))

    def passed_quantum(self, grant: Grant, tokens: int) -> None:
        """A watched generation just became a candidate for a pause: say so at once."""
        self.dispatcher.report_progress(grant, tokens)

    def continuation(self, adm: Admission, request_id: str, age_s: float) -> Admission:
        """The ticket of a paused request's next part: its original arrival (``age_s``
        ago) and no slack, so it is first in line for the next free slot of its tier (it
        gave its own to more urgent work); one more pause; no second fair-share charge."""
        t = adm.ticket
        pauses = t.pauses + 1
        ticket = dataclasses.replace(
            t, id=f"{request_id}-p{pauses}", pauses=pauses, age_s=age_s, slack_s=0.0, cost_s=0.0
        )
        return dataclasses.replace(adm, ticket=ticket)

    def complete(self, adm: Admission, grant: Grant, result: CallResult, service_s: float) -> None:
        """Release the slot, report the backend's health and speed, learn the length."""
        self.dispatcher.release_soon(grant)
        self.registry.report(grant.backend, result.ok, result.overloaded, result.ttft_s, result.tpot_s)
        reservation = self.registry.reservations[adm.pool]
        if adm.ticket.restricted:
            reservation.on_restricted_done(service_s)
        else:
            reservation.on_open_done(service_s)
        # Replies cut at max_tokens are learned too: leaving them out would teach the
        # model only the replies that ended early, biasing it low; the cap is a feature,
        # so what a cut reply teaches lands mostly on the cap, not on the text.
        if result.tokens is not None and result.ok:
            self.classifier.learn(adm.inp, result.tokens)
