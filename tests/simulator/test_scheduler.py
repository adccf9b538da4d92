"""The scheduler's decisions, step by step, without time."""

from __future__ import annotations

from dataclasses import replace

from simulator.profiles import FAST, BatchingMode, Profile
from simulator.protocol import FinishReason
from simulator.scheduler import Scheduler
from simulator.sequence import Sequence


def seq(prompt: int, target: int) -> Sequence:
    return Sequence(prompt, target, FinishReason.STOP, streamed=True, arrival=0.0)


def run_step(s: Scheduler) -> tuple[list[Sequence], list[Sequence], int]:
    plan = s.schedule()
    result = s.update(plan, now=0.0)
    return list(result.produced), list(result.finished), plan.preempted


def profile(**changes: object) -> Profile:
    return replace(FAST, **changes)  # type: ignore[arg-type]


def test_decode_produces_one_token_per_running_sequence_per_step() -> None:
    s = Scheduler(profile())
    a, b = seq(10, 3), seq(10, 3)
    s.add(a)
    s.add(b)
    for step in range(1, 4):
        produced, finished, _ = run_step(s)
        assert produced == [a, b]
        assert (a.generated, b.generated) == (step, step)
    assert finished == [a, b]
    assert not s.has_work()
    assert s.kv_used == 0


def test_long_prompts_are_prefilled_in_chunks_of_the_token_budget() -> None:
    s = Scheduler(profile(max_num_batched_tokens=100))
    a = seq(250, 2)
    s.add(a)
    assert run_step(s)[0] == []  # 100 of 250
    assert run_step(s)[0] == []  # 200 of 250
    assert run_step(s)[0] == [a]  # the last 50, and the first token
    assert a.computed == 250


def test_at_most_max_num_seqs_run_and_the_rest_wait_in_arrival_order() -> None:
    s = Scheduler(profile(max_num_seqs=2))
    seqs = [seq(5, 2) for _ in range(5)]
    for x in seqs:
        s.add(x)
    run_step(s)
    assert s.running == seqs[:2]
    assert list(s.waiting) == seqs[2:]
    run_step(s)  # the first two finish
    run_step(s)
    assert s.running == seqs[2:4]


def test_admission_waits_for_kv_room() -> None:
    s = Scheduler(profile(kv_capacity_tokens=100))
    a, b = seq(60, 2), seq(60, 2)
    s.add(a)
    s.add(b)
    run_step(s)
    assert s.running == [a] and list(s.waiting) == [b]
    run_step(s)  # a finishes and frees its KV
    run_step(s)
    assert s.running == [b]


def test_a_full_kv_cache_preempts_the_newest_sequence_which_later_recomputes() -> None:
    s = Scheduler(profile(kv_capacity_tokens=64))
    a, b = seq(30, 10), seq(30, 10)
    s.add(a)
    s.add(b)
    run_step(s)  # both prefilled: 60 slots
    assert s.kv_used == 60
    preemptions = 0
    while b.finish_reason is None:
        preemptions += run_step(s)[2]
        assert s.kv_used <= 64
    assert preemptions >= 1
    assert a.finish_reason is FinishReason.STOP and a.generated == 10
    assert b.generated == 10


def test_static_mode_admits_only_into_an_idle_engine() -> None:
    s = Scheduler(profile(mode=BatchingMode.STATIC))
    long, short = seq(5, 5), seq(5, 1)
    s.add(long)
    run_step(s)
    s.add(short)
    for _ in range(4):
        run_step(s)
        assert short.generated == 0
    assert long.finish_reason is FinishReason.STOP
    run_step(s)
    assert short.finish_reason is FinishReason.STOP


def test_static_batches_pay_for_their_finished_rows() -> None:
    s = Scheduler(
        profile(mode=BatchingMode.STATIC, step_per_seq_s=1.0, step_base_s=0.0, prefill_per_token_s=0.0)
    )
    s.add(seq(1, 1))
    s.add(seq(1, 5))
    s.update(s.schedule(), 0.0)  # one of the two finishes on its first token
    assert len(s.running) == 1
    assert s.schedule().duration_s == 2.0  # still costs the whole batch


def test_abort_frees_kv_and_removes_the_sequence() -> None:
    s = Scheduler(profile(max_num_seqs=1))
    a, b = seq(10, 100), seq(10, 100)
    s.add(a)
    s.add(b)
    run_step(s)
    s.remove(a)
    s.remove(b)
    assert not s.has_work() and s.kv_used == 0
