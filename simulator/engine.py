"""The engine loop: one asyncio task that runs steps in real time.

Each iteration asks the scheduler for a plan, sleeps for the plan's duration, applies it,
then wakes the handlers whose sequences made progress: one sleep per step however many
sequences run, and one ``Event.set`` per sequence that has news.

Steps are timed against a running deadline rather than "now + duration": the event
loop's sleeps overshoot (epoll waits in whole milliseconds), and measuring from the
previous deadline keeps the average step exactly the modelled length. If the process
falls further behind than ``MAX_LAG_S`` (an overloaded CPU) the deadline is reset, so
the engine slows down instead of bursting to catch up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from simulator.metrics import Gauges, Metrics
from simulator.profiles import Profile
from simulator.protocol import FinishReason
from simulator.scheduler import Scheduler
from simulator.sequence import Sequence

MAX_LAG_S = 0.005

log = logging.getLogger("triage.simulator")


class Engine:
    """Serves sequences under a profile's timing model. Start with ``start()`` inside a loop."""

    def __init__(self, profile: Profile, metrics: Metrics) -> None:
        self.profile = profile
        self.metrics = metrics
        self._scheduler = Scheduler(profile)
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="simulator-engine")

    async def stop(self) -> None:
        """Stop stepping and end every sequence as aborted, so no handler waits forever."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for seq in [*self._scheduler.running, *self._scheduler.waiting]:
            self.abort(seq)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def submit(self, seq: Sequence) -> None:
        self.metrics.requests += 1
        self._scheduler.add(seq)
        self._work.set()

    def abort(self, seq: Sequence) -> None:
        """End a sequence early (client gone, shutdown). No-op if it already ended."""
        if seq.finished:
            return
        self._scheduler.remove(seq)
        now = self.now()
        seq.finish(FinishReason.ABORT, now)
        self._record_finish(seq, now)

    def gauges(self) -> Gauges:
        s = self._scheduler
        return Gauges(
            running=len(s.running),
            waiting=len(s.waiting),
            kv_usage=s.kv_usage,
            cached_tokens=s.kv.cached_tokens,
        )

    def reset_metrics(self) -> None:
        self.metrics.reset(running=len(self._scheduler.running))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        scheduler = self._scheduler
        metrics = self.metrics
        deadline = loop.time()
        while True:
            if not scheduler.has_work():
                self._work.clear()
                await self._work.wait()
                deadline = loop.time()
            plan = scheduler.schedule()
            if not plan.scheduled:
                # Everything waiting is blocked (cannot happen with a sane profile, as the
                # context window fits the KV cache); wait for the next arrival or abort.
                log.warning(
                    "the engine can schedule nothing: %d running, %d waiting, KV %d of %d used; "
                    "it waits for the next arrival", len(scheduler.running), len(scheduler.waiting),
                    scheduler.kv_used, self.profile.kv_capacity_tokens,
                )
                self._work.clear()
                await self._work.wait()
                deadline = loop.time()
                continue
            metrics.preemptions += plan.preempted
            metrics.prefill_computed += plan.prefill_tokens
            metrics.prefix_queries += plan.queried_tokens
            metrics.prefix_hits += plan.cached_tokens
            running = len(scheduler.running)
            if running > metrics.peak_running:
                metrics.peak_running = running

            deadline += plan.duration_s
            now = loop.time()
            if now - deadline > MAX_LAG_S:
                deadline = now
            # sleep(0) still yields, so handlers run between zero-length steps.
            await asyncio.sleep(max(0.0, deadline - now))

            now = loop.time()
            result = scheduler.update(plan, now)
            metrics.generation_tokens += len(result.produced)
            for seq in result.produced:
                if seq.generated == 1 and seq.first_token_at == now:
                    metrics.prompt_tokens += seq.prompt_tokens
                    metrics.ttft.observe(now - seq.arrival)
                    metrics.prefilled(now - (seq.scheduled_at or now), seq.prefill_computed)
                elif seq.last_token_at is not None:
                    metrics.itl_sum += now - seq.last_token_at
                    metrics.itl_count += 1
                seq.last_token_at = now
                if seq.streamed:
                    seq.notify()
            for seq in result.finished:
                if seq.generated == 0 and seq.finish_reason is not FinishReason.ABORT:
                    metrics.prompt_tokens += seq.prompt_tokens  # ended at EOS without a token
                self._record_finish(seq, now)

    def _record_finish(self, seq: Sequence, now: float) -> None:
        reason = seq.finish_reason
        assert reason is not None
        self.metrics.finished[reason] += 1
        self.metrics.e2e.observe(now - seq.arrival)
