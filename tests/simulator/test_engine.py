"""The engine loop in real time (the fast profile): sequences served to their end, woken
as tokens come, counted in the vLLM-style metrics; aborts and a stop end what runs."""

from __future__ import annotations

from dataclasses import replace

from simulator.engine import Engine
from simulator.metrics import Metrics
from simulator.profiles import FAST
from simulator.protocol import FinishReason
from simulator.sequence import Sequence


def sequence(engine: Engine, prompt: int = 10, target: int = 5, streamed: bool = True) -> Sequence:
    return Sequence(prompt, target, FinishReason.STOP, streamed=streamed, arrival=engine.now())


async def test_a_streamed_sequence_wakes_its_reader_as_tokens_come_and_is_counted() -> None:
    engine = Engine(FAST, Metrics("m"))
    engine.start()
    seq = sequence(engine)
    engine.submit(seq)
    seen = []
    while not seq.finished:
        await seq.wait()
        seen.append(seq.generated)
    await engine.stop()

    assert seq.finish_reason is FinishReason.STOP and seq.generated == 5
    assert seen == sorted(seen) and seen[-1] == 5 and len(seen) >= 2  # news step by step, not once
    m = engine.metrics
    assert (m.requests, m.prompt_tokens, m.generation_tokens) == (1, 10, 5)
    assert m.finished[FinishReason.STOP] == 1 and m.ttft.count == 1 and m.e2e.count == 1
    assert m.peak_running == 1 and engine.gauges().running == 0
    # what a resume would cost, as vLLM counts it: one prefill of the whole prompt, then
    # a gap before each of the other four tokens
    assert (m.prefill_requests, m.prefill_tokens, m.itl_count) == (1, 10, 4)
    assert m.prefill_s > 0 and m.itl_sum > 0


async def test_a_whole_answer_costs_one_wake_up() -> None:
    engine = Engine(FAST, Metrics("m"))
    engine.start()
    seq = sequence(engine, target=20, streamed=False)
    engine.submit(seq)
    await seq.wait()
    assert seq.finished and seq.generated == 20  # woken once, at the end
    await engine.stop()


async def test_an_aborted_sequence_ends_at_once_and_counts_as_abort() -> None:
    engine = Engine(FAST, Metrics("m"))
    engine.start()
    seq = sequence(engine, target=100_000)
    engine.submit(seq)
    await seq.wait()  # running
    engine.abort(seq)
    engine.abort(seq)  # twice: a no-op
    assert seq.finish_reason is FinishReason.ABORT
    assert engine.metrics.finished[FinishReason.ABORT] == 1
    assert engine.gauges().running == 0 and engine.gauges().kv_usage == 0
    await engine.stop()


async def test_stop_ends_what_runs_and_waits_so_no_reader_waits_forever() -> None:
    engine = Engine(replace(FAST, max_num_seqs=1), Metrics("m"))
    engine.start()
    running, waiting = sequence(engine, target=100_000), sequence(engine, target=100_000)
    engine.submit(running)
    engine.submit(waiting)
    await running.wait()
    assert engine.gauges().waiting == 1  # one slot: the other waits

    await engine.stop()

    assert running.finish_reason is FinishReason.ABORT and waiting.finish_reason is FinishReason.ABORT
    assert engine.metrics.finished[FinishReason.ABORT] == 2


async def test_reset_metrics_keeps_what_runs_as_the_peak() -> None:
    engine = Engine(FAST, Metrics("m"))
    engine.start()
    seq = sequence(engine, target=100_000)
    engine.submit(seq)
    await seq.wait()
    engine.reset_metrics()
    assert engine.metrics.requests == 0 and engine.metrics.peak_running == 1
    await engine.stop()
