"""The scheduler as the gateway sees it: one object, and one ``Job`` per request.

    admit ─► Job: start ─► (grant) ─► failed / back_off / pause ─► ... ─► finish

``Scheduler.admit`` places a request — prediction, class, queue order, the rules that
follow from them (restricted work; reservation bookkeeping) — and returns its ``Job``
(``job.py``), which the gateway then tells what happens. Unknown model: ``NoBackend``;
every backend of it down past the grace: ``BackendsDown``. Whose length hints are
believed is decided here, at admission (``policy/hints.py``); everything after it —
queueing, routing each grant, completing each part — is the job's.
"""

from __future__ import annotations

import asyncio
import dataclasses

from scheduler.backends.registry import BackendRegistry
from scheduler.errors import NoBackend
from scheduler.job import Job, JobRequest, SchedulerParams, Shared, all_down
from scheduler.policy.classify import Classifier
from scheduler.policy.hints import HintTrust
from scheduler.queue.dispatcher import Dispatcher
from scheduler.quotas import Quotas
from scheduler.types import LengthClass, PredictInput, Ticket


class Scheduler:
    def __init__(
        self, dispatcher: Dispatcher, registry: BackendRegistry, classifier: Classifier, params: SchedulerParams,
        quotas: Quotas | None = None, hints: HintTrust | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.registry = registry
        self.classifier = classifier
        self.params = params
        self.hints = hints if hints is not None else HintTrust()  # whose length hints hold
        self._shared = Shared(dispatcher, registry, classifier, params, quotas, self.hints)

    async def admit(self, inp: PredictInput, request: JobRequest) -> Job:
        """The request's place and its job. ``inp.hint`` is the hint its key may send;
        it is believed only while its tenant's replies bear such hints out."""
        pool = self.registry.pool_of(inp.model)
        if pool is None:
            raise NoBackend(f"The model '{inp.model}' does not exist or no backend serves it.")
        timeout_s = request.timeout_s
        down_for = self.registry.down_for(inp.model)
        grace_s = self.params.no_backend_grace_s
        if down_for is not None:
            if down_for >= grace_s:
                raise all_down(inp.model)
            # a breaker may close soon: wait for it, but no longer than the grace
            left = grace_s - down_for
            timeout_s = min(timeout_s, left) if timeout_s > 0 else left
        claimed = inp.hint
        if claimed is not None and not self.hints.trusted(inp.tenant):
            inp = dataclasses.replace(inp, hint=None)
        tier = request.tier
        if self.classifier.blocking:  # a neural predictor: keep the event loop free
            placement = await asyncio.to_thread(self.classifier.place, inp, tier, request.oracle_tokens)
        else:
            placement = self.classifier.place(inp, tier, request.oracle_tokens)
        # restricted work may hold only its share of a backend (reservation)
        restricted = placement.cls is LengthClass.LONG or tier != self.params.open_tier
        ticket = Ticket(
            id=request.request_id, model=inp.model, tenant=inp.tenant, cls=placement.cls.value,
            predicted=int(placement.prediction.tokens), timeout_s=timeout_s, tier=tier,
            slack_s=placement.order.slack_s, tier_offset_s=placement.order.tier_offset_s,
            cost_s=placement.order.cost_s, restricted=restricted,
        )
        reservation = self.registry.reservations[pool]
        if restricted:
            reservation.on_restricted_arrival()
        else:
            reservation.on_open_arrival()
        return Job(self._shared, request, pool, inp, placement, ticket, claimed)


