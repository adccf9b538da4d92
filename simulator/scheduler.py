"""Which sequences run in the next engine step, after vLLM v1's scheduler.

Decide, then do: ``schedule()`` admits, allocates KV and preempts, and returns a
``StepPlan``; once the step's time has passed, ``update()`` applies the tokens it produced.

KV cache, the vLLM way: a sequence holds slots for the tokens computed so far (prompt,
then one more per decode step), not for ``prompt + max_tokens`` up front. Admission needs
room for the first prefill chunk only. When a running sequence cannot grow, the most
recently admitted sequence is preempted: its KV is freed, it goes back to the head of the
queue and later recomputes prompt plus generated tokens (recompute preemption).

Prefill is chunked: a step computes at most ``max_num_batched_tokens`` tokens, decodes
first (one token per running sequence), then prefill chunks in admission order.

With prefix caching (``simulator/kvcache.py``) an admitted sequence whose leading blocks
are cached starts with them computed, so only the rest of its prompt is prefilled and
charged; blocks are registered as the step that completes them is applied.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from simulator.kvcache import KvCache
from simulator.profiles import BatchingMode, Profile
from simulator.protocol import FinishReason
from simulator.sequence import Sequence


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What one engine step computes."""

    scheduled: tuple[tuple[Sequence, int], ...]  # each sequence in the step, with tokens it computes
    preempted: int  # sequences sent back to the queue to free KV this step
    duration_s: float  # how long the step takes under the profile's timing model
    prefill_tokens: int = 0  # prompt (or recomputed) tokens computed in the step
    queried_tokens: int = 0  # tokens of the sequences admitted, looked up in the prefix cache
    cached_tokens: int = 0  # of those, tokens found cached (not computed)


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one engine step produced."""

    produced: tuple[Sequence, ...]  # sequences that got one new output token
    finished: tuple[Sequence, ...]  # sequences that reached their end this step


class Scheduler:
    """The waiting queue, the running batch and the KV-cache ledger of one engine."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.waiting: deque[Sequence] = deque()  # FCFS; preempted sequences re-enter at the head
        self.running: list[Sequence] = []  # admission order; the tail is preempted first
        self.kv = KvCache(profile.kv_capacity_tokens, profile.block_size, profile.prefix_caching)
        # Static batching pads: finished rows keep costing compute until the batch drains.
        self._static_batch = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take a sequence out wherever it is (abort); frees its KV."""
        if seq in self.running:
            self.running.remove(seq)
        else:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        self.kv.release(seq)
        if not self.running:
            self._static_batch = 0

    @property
    def kv_used(self) -> int:
        return self.kv.used

    @property
    def kv_usage(self) -> float:
        return self.kv.used / self.profile.kv_capacity_tokens

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def schedule(self) -> StepPlan:
        p, kv = self.profile, self.kv
        budget = p.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []
        ctx_tokens = 0
        prefill_tokens = 0
        preempted = 0
        queried = cached = 0
        static = p.mode is BatchingMode.STATIC
        may_admit = not static or not self.running

        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.to_compute, budget)
            victim = None
            while kv.room < n:
                victim = self.running.pop()
                kv.release(victim)
                victim.computed = 0
                self.waiting.appendleft(victim)
                preempted += 1
                if victim is seq:
                    break
            if victim is seq:
                break
            ctx_tokens += seq.computed
            if seq.to_compute > 1:
                prefill_tokens += n
            kv.allocate(seq, n)
            scheduled.append((seq, n))
            budget -= n
            i += 1

        if may_admit and not preempted:
            while self.waiting and len(self.running) < p.max_num_seqs and (budget > 0 or static):
                seq = self.waiting[0]
                hit = kv.lookup(seq)
                todo = seq.to_compute - hit.tokens
                n = min(todo, budget)
                if kv.room < (todo if static else n) + hit.reclaimed:
                    break
                self.waiting.popleft()
                self.running.append(seq)
                if kv.caching:
                    queried += seq.prompt_tokens + seq.generated
                    cached += hit.tokens
                kv.take(seq, hit)
                if n:
                    ctx_tokens += seq.computed
                    prefill_tokens += n
                    kv.allocate(seq, n)
                    scheduled.append((seq, n))
                    budget -= n
            if static:
                self._static_batch = max(self._static_batch, len(self.running))

        n_seqs = max(len(scheduled), self._static_batch) if static else len(scheduled)
        duration = p.step_seconds(n_seqs, ctx_tokens, prefill_tokens) if scheduled else 0.0
        return StepPlan(
            scheduled=tuple(scheduled),
            preempted=preempted,
            duration_s=duration,
            prefill_tokens=prefill_tokens,
            queried_tokens=queried,
            cached_tokens=cached,
        )

    def update(self, plan: StepPlan, now: float) -> StepResult:
        produced: list[Sequence] = []
        finished: list[Sequence] = []
        for seq, n in plan.scheduled:
            if seq.finished:  # aborted while the step ran
                continue
            seq.computed += n
            if seq.first_token_at is None:
                seq.prefill_computed += n
                if seq.scheduled_at is None:
                    seq.scheduled_at = now - plan.duration_s
            self.kv.register(seq)
            if seq.computed < seq.prompt_tokens + seq.generated:
                continue  # a prefill chunk that did not reach the end of the prompt
            if seq.target_tokens == 0:  # EOS is the first thing sampled: nothing to deliver
                seq.finish(seq.planned_reason, now)
                finished.append(seq)
                continue
            seq.generated += 1
            if seq.first_token_at is None:
                seq.first_token_at = now
            produced.append(seq)
            if seq.generated >= seq.target_tokens:
                seq.finish(seq.planned_reason, now)
                finished.append(seq)
            elif seq.drop_after is not None and seq.generated >= seq.drop_after:
                seq.dropped = True
                seq.finish(FinishReason.ABORT, now)
                finished.append(seq)
        if finished:
            self.running = [s for s in self.running if not s.finished]
            for seq in finished:
                self.kv.release(seq)
            if not self.running:
                self._static_batch = 0
        return StepResult(produced=tuple(produced), finished=tuple(finished))
