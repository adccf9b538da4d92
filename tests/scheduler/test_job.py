"""A ``Job`` told what happens to its request, against a real dispatcher and registry on a
real Redis-protocol server: grants and their routes, one retry, backing off, pausing,
each part ended once, the request settled once."""

from __future__ import annotations

import asyncio
import logging
import math
import time

import pytest

from scheduler.errors import BackendOverloaded, BackendsDown, DeadlineExceeded, NoBackend, QuotaExceeded
from scheduler.job import Job, SchedulerParams
from scheduler.policy.hints import HintTrust
from scheduler.policy.order import PolicyName
from scheduler.policy.quota import QuotaLimits, reserve_tokens
from scheduler.predictor.lexical import LengthPredictor
from scheduler.predictor.prior import PriorPredictor
from scheduler.queue.keys import QuotaKeys
from scheduler.queue.records import pack_progress, parse_progress
from scheduler.queue.scripts import Timing
from scheduler.types import CallResult, Grant, PredictInput
from tests.scheduler.stack import (
    POOL,
    TENANT,
    ScriptedProbe,
    Stack,
    ask,
    backend,
    make_stack,  # noqa: F401 - the `make` fixture
    request,
)
from tests.support import eventually

OK = CallResult(True, tokens=5)




async def admitted(s: Stack, inp: PredictInput | None = None, **req: object) -> Job:
    return await s.scheduler.admit(inp or ask(), request(**req))


async def granted(job: Job) -> Grant:
    return await (await job.start())


def the_other(name: str) -> str:
    return "b" if name == "a" else "a"


# -- start -----------------------------------------------------------------------------


async def test_start_is_granted_in_the_enqueue_reply_and_routed_to_the_grants_backend(make) -> None:
    s = await make(backend("a"), backend("b", max_concurrency=2))
    job = await admitted(s)
    future = await job.start()
    assert future.done()  # uncontended: the enqueue script's own reply granted it
    grant = future.result()
    assert grant.ticket == job.ticket.id == job.request.request_id and grant.pool == POOL
    assert job.grant == grant
    assert job.route is not None and job.route.backend == s.registry.config_of(grant.backend)
    assert job.route.priority is None  # engine_priority is off
    assert await s.busy(grant.backend) == 1


@pytest.mark.parametrize(("engine", "priority"), [("vllm", 1000), ("sglang", -1000), ("tgi", None)])
async def test_the_route_is_worked_out_once_per_grant(make, engine: str, priority: int | None) -> None:
    """The priority an engine with its own queue is sent: the ticket's slack in ms, in the
    engine's direction. It is the grant's: a reload that changes the backend changes the
    next grant's route, not the running one's."""
    s = await make(backend("a", engine_priority=True, engine=engine), policy=PolicyName.SHORT_FIRST,
                   predictor=PriorPredictor(50.0))  # 50 tokens x 0.02 s: 1 s of slack
    job = await admitted(s)
    await granted(job)
    route = job.route
    assert route is not None and route.priority == priority
    await s.registry.reconcile([backend("a", engine_priority=False, engine=engine)])
    assert job.route is route and route.backend.engine_priority
    job.finish(OK, None)
    following = await admitted(s)
    await granted(following)
    assert following.route is not None and following.route.priority is None
    assert following.route.backend == s.registry.config_of("a")


async def test_a_queued_job_gets_the_slot_another_gives_back(make) -> None:
    s = await make(backend("a"))
    first = await admitted(s)
    await granted(first)
    second = await admitted(s)
    waiting = await second.start()
    assert not waiting.done() and second.grant is None
    assert await second.position() == 1
    first.finish(OK, None)
    grant = await waiting
    assert grant.backend == "a" and second.grant == grant
    assert second.route is not None and second.route.backend.name == "a"
    assert await s.busy("a") == 1
    assert await s.redis.hget(s.keys.lease, first.ticket.id) is None
    assert await second.position() is None  # out of the queue


async def test_cancelling_the_wait_withdraws_the_ticket(make) -> None:
    s = await make(backend("a"))
    first = await admitted(s)
    await granted(first)
    second = await admitted(s)
    waiting = await second.start()
    await eventually(lambda: s.queued_is(1))
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await eventually(lambda: s.queued_is(0))
    first.finish(OK, None)
    await eventually(lambda: s.busy_is("a", 0))  # nobody was granted the freed slot
    assert s.dispatcher.queued_here == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the bug: a wait never awaited
@pytest.mark.filterwarnings("ignore:coroutine 'Dispatcher.wait' was never awaited:RuntimeWarning")
async def test_cancelling_the_wait_at_once_withdraws_the_ticket(make) -> None:
    s = await make(backend("a"))
    first = await admitted(s)
    await granted(first)
    second = await admitted(s)
    waiting = await second.start()
    waiting.cancel()  # no await in between: the client had left while the enqueue was on its way
    with pytest.raises(asyncio.CancelledError):
        await waiting
    first.finish(OK, None)
    await eventually(lambda: s.busy_is("a", 0), within_s=2.0)  # the freed slot went to nobody


# -- a call that failed ----------------------------------------------------------------


async def test_a_failed_call_is_retried_once_on_another_backend_then_given_up(make) -> None:
    s = await make(backend("a"), backend("b"))
    job = await admitted(s)
    first = await granted(job)
    other = the_other(first.backend)
    retry = job.failed()
    assert retry is not None
    second = await retry
    assert second.backend == other
    assert job.ticket.id == f"{job.request.request_id}-retry" and job.ticket.avoid == first.backend
    assert job.route is not None and job.route.backend.name == other
    assert s.registry.backends[first.backend].errors_total == 1  # the failure is reported
    await eventually(lambda: s.busy_is(first.backend, 0))
    assert await s.busy(other) == 1
    assert job.failed() is None  # one retry: the client gets a 502
    assert s.registry.backends[other].errors_total == 1
    await eventually(lambda: s.busy_is(other, 0))


@pytest.mark.parametrize("others", ["none", "down"])
async def test_a_failed_call_without_another_healthy_backend_is_not_retried(make, others: str) -> None:
    if others == "none":
        s = await make(backend("a"))
    else:
        s = await make(backend("a"), backend("b"), fail_threshold=1, probe=ScriptedProbe(down={"b"}))
        assert not s.registry.backends["b"].healthy
    job = await admitted(s)
    assert (await granted(job)).backend == "a"
    assert job.failed() is None
    await eventually(lambda: s.busy_is("a", 0))
    assert await s.queued() == 0


# -- backing off -----------------------------------------------------------------------


async def test_back_off_cools_the_backend_and_queues_again_with_an_overload_ticket(make) -> None:
    s = await make(backend("a"), backend("b"))
    job = await admitted(s)
    first = await granted(job)
    again = await job.back_off(429, 60.0)
    grant = await again
    assert grant.backend == the_other(first.backend)
    assert job.ticket.id == f"{job.request.request_id}-o1" and grant.ticket == job.ticket.id
    assert (job.overloads, job.overload_status) == (1, 429)
    refused = s.registry.backends[first.backend]
    assert refused.cooling and await s.down_in_redis(first.backend)  # no grants while it cools
    assert refused.healthy and refused.errors_total == 0  # busy, not broken
    await eventually(lambda: s.busy_is(first.backend, 0))


async def test_a_job_queued_again_keeps_its_arrival(make) -> None:
    """Queued again after a 429, it goes before a ticket that was already waiting when it
    was refused but arrived after it."""
    s = await make(backend("a"), backend("b"))
    # it arrived 5 s before it was queued (an age far above the few ms a re-queue takes)
    refused, running = await admitted(s, arrived=time.monotonic() - 5), await admitted(s)
    first = await granted(refused)
    held = await granted(running)
    later = await admitted(s)
    waiting = await later.start()
    await eventually(lambda: s.queued_is(1))
    again = await refused.back_off(503, 60.0)  # its backend cools for a minute
    await eventually(lambda: s.queued_is(2))  # queued again (the future's task enqueues it)
    running.finish(OK, None)  # the other backend's slot frees
    grant = await again
    assert grant.backend == held.backend != first.backend
    assert not waiting.done() and await later.position() == 1


async def test_a_backend_whose_cool_down_ends_is_granted_again(make) -> None:
    s = await make(backend("a"))
    job = await admitted(s)
    await granted(job)
    grant = await (await job.back_off(429, 0.2))
    assert grant.backend == "a" and grant.ticket == f"{job.request.request_id}-o1"
    assert not s.registry.backends["a"].cooling
    assert not await s.down_in_redis("a")


async def test_back_off_past_the_deadline_gives_up_at_once(make) -> None:
    s = await make(backend("a"))
    job = await admitted(s, timeout_s=5.0, arrived=time.monotonic() - 10)
    await granted(job)
    with pytest.raises(BackendOverloaded) as err:
        await job.back_off(429, 1.0)
    assert err.value.status == 429
    await eventually(lambda: s.busy_is("a", 0))
    assert await s.queued() == 0


async def test_back_off_gives_up_when_no_backend_is_free_before_the_deadline(make) -> None:
    s = await make(backend("a"))
    job = await admitted(s, timeout_s=5.0)
    await granted(job)
    with pytest.raises(BackendOverloaded) as err:
        await job.back_off(503, 60.0)
    assert err.value.status == 503
    assert err.value.retry_after_s is not None and 5.0 < err.value.retry_after_s <= 60.0  # when one is free
    assert await s.queued() == 0


async def test_back_off_gives_up_past_the_attempts_allowed(make) -> None:
    s = await make(backend("a"), backend("b"), params=SchedulerParams("interactive", overload_max_attempts=1))
    job = await admitted(s)  # no deadline: only the attempts bound it
    await granted(job)
    await (await job.back_off(429, 60.0))
    assert isinstance(job.explain(DeadlineExceeded("late")), BackendOverloaded)  # the backends' refusal
    with pytest.raises(BackendOverloaded):
        await job.back_off(429, 60.0)
    assert job.overloads == 2
    await eventually(lambda: s.busy_is("a", 0))
    await eventually(lambda: s.busy_is("b", 0))


async def test_explain_names_every_backend_down_and_leaves_other_errors(make) -> None:
    s = await make(backend("a"), fail_threshold=1)
    job = await admitted(s)
    late = DeadlineExceeded("late")
    assert job.explain(late) is late
    s.probe.down.add("a")
    await s.registry.probe_all()
    assert isinstance(job.explain(late), BackendsDown)


# -- waiting while no backend may serve it ---------------------------------------------


async def test_a_wait_ends_when_every_backend_of_the_model_goes_down(make) -> None:
    s = await make(backend("a"), fail_threshold=1)
    first = await admitted(s)
    await granted(first)
    second = await admitted(s)
    waiting = await second.start()
    await eventually(lambda: s.queued_is(1))
    s.probe.down.add("a")
    await s.registry.probe_all()
    with pytest.raises(BackendsDown):
        await waiting
    await eventually(lambda: s.queued_is(0))


async def test_a_wait_ends_when_a_reload_removes_the_last_backend(make) -> None:
    s = await make(backend("a"))
    first = await admitted(s)
    await granted(first)
    second = await admitted(s)
    waiting = await second.start()
    await eventually(lambda: s.queued_is(1))
    await s.registry.reconcile([])
    with pytest.raises(NoBackend) as err:
        await waiting
    assert not isinstance(err.value, BackendsDown)
    await eventually(lambda: s.queued_is(0))


# -- pausing ---------------------------------------------------------------------------


async def pausing(make) -> Stack:
    """One backend that can resume, strict priority: a batch lease past its 64-token quantum
    is paused for an interactive request."""
    return await make(
        backend("a", resume=True), policy=PolicyName.STRICT_PRIORITY, predictor=PriorPredictor(10.0),
        timing=Timing(lease_ttl_s=30.0, owner_ttl_s=3.0, max_scan=64, preempt=True, quantum_tokens=64),
        params=SchedulerParams("interactive", preempt=True, quantum_tokens=64),
    )


async def test_a_paused_job_queues_a_continuation_that_keeps_its_arrival(make) -> None:
    """A batch generation past its quantum is paused for an interactive request (the real
    dispatch script decides); its continuation ``-p1`` goes before a batch request that
    arrived after it, though that one was queued first."""
    s = await pausing(make)
    long = await admitted(s, tier="batch", arrived=time.monotonic() - 20)
    lease = await granted(long)
    assert long.may_pause
    paused = asyncio.Event()
    assert long.watch(lambda: 500, paused.set, tokens=0) == 64  # a candidate past 64 tokens
    long.passed_quantum(500)

    async def progress_known() -> bool:
        reported = await s.redis.hget(s.keys.progress, lease.ticket)  # with its prompt's estimated tokens
        return reported is not None and parse_progress(reported) == (500, math.ceil(long.inp.prompt_chars / 4))

    await eventually(progress_known)
    urgent = await admitted(s)  # interactive
    assert (await granted(urgent)).backend == "a"  # the slot changed hands in one script
    assert paused.is_set()
    assert long.pause_reason.startswith("wait=") and ",cost=" in long.pause_reason  # what the script weighed
    later = await admitted(s, tier="batch")
    later_wait = await later.start()
    continuation = await long.pause()
    ticket = long.ticket
    assert ticket.id == f"{long.request.request_id}-p1" and ticket.pauses == 1
    assert ticket.slack_s == 0.0 and ticket.cost_s == 0.0 and ticket.age_s >= 20
    await eventually(lambda: s.queued_is(2))
    urgent.finish(OK, None)
    resumed = await continuation
    assert resumed.backend == "a" and resumed.ticket == ticket.id
    assert not later_wait.done() and await later.position() == 1
    assert await s.busy("a") == 1  # the paused part's slot was not given back twice
    # the resumed part has paid its re-read: it is offered as a victim again only once it
    # has made a quantum of progress of its own, however far the request got before (then
    # ``later``, queued in its tier within the starvation bound, may take its slot)
    tokens, paused_again = [500], asyncio.Event()
    assert long.watch(lambda: tokens[0], paused_again.set, tokens=500) == 564
    await s.dispatcher.heartbeat(POOL)
    assert await s.redis.hget(s.keys.progress, resumed.ticket) is None
    assert not paused_again.is_set() and not later_wait.done()
    tokens[0] = 565
    await s.dispatcher.heartbeat(POOL)
    assert paused_again.is_set() and (await later_wait).backend == "a"
    later.finish(OK, None)
    long.finish(OK, None)


async def test_a_pause_of_a_held_lease_nobody_follows_is_logged(make, caplog: pytest.LogCaptureFixture) -> None:
    """The script gives away the slot of a lease whose progress it holds; if this replica
    holds the lease but nothing follows its generation (nothing can close it), the
    generation runs on beside the work its slot went to: said in the log, not silent."""
    s = await pausing(make)
    long = await admitted(s, tier="batch", arrived=time.monotonic() - 20)
    lease = await granted(long)
    await s.redis.hset(s.keys.progress, lease.ticket, pack_progress(500, 10))  # reported, then not followed
    with caplog.at_level(logging.WARNING, logger="triage.dispatcher"):
        urgent = await admitted(s)
        assert (await granted(urgent)).backend == "a"  # the slot changed hands
    assert [r.getMessage() for r in caplog.records] == [
        f"lease {lease.ticket} was paused, but this replica does not follow its generation: "
        "it runs on beside the work its slot went to"]
    urgent.finish(OK, None)
    long.finish(OK, None)


# -- ending ----------------------------------------------------------------------------


async def test_a_part_ends_once_per_grant(make) -> None:
    s = await make(backend("a"), hints=HintTrust())
    job = await admitted(s, ask(hint=40))
    await granted(job)
    predictor = s.predictor
    assert isinstance(predictor, LengthPredictor) and predictor.observations == 0
    job.end_part(CallResult(True, tokens=30))
    job.end_part(CallResult.failed())  # too late: the part is over
    await eventually(lambda: s.busy_is("a", 0))
    assert predictor.observations == 1  # learned once
    record = s.scheduler.hints.record(TENANT)
    assert record is not None and record.seen == 1  # the hint compared once
    assert s.registry.backends["a"].errors_total == 0
    job.finish(OK, None)
    assert predictor.observations == 1


async def test_a_failed_part_teaches_nothing_and_finish_does_not_end_it_again(make) -> None:
    s = await make(backend("a"))
    job = await admitted(s)
    await granted(job)
    assert job.failed() is None
    job.finish(CallResult(True, tokens=9), None)
    assert s.registry.backends["a"].errors_total == 1
    assert isinstance(s.predictor, LengthPredictor) and s.predictor.observations == 0


TPM = 600


async def tokens_held(s: Stack) -> float:
    """The tenant's tokens-per-minute bucket as Redis holds it (it drains only with time)."""
    bucket = QuotaKeys(s.keys.prefix, TENANT, "-").tenant_bucket
    return float(await s.redis.hget(bucket, "t") or 0)


async def settled(s: Stack) -> None:
    assert s.quotas is not None
    await s.quotas.stop()  # returns once the settles under way are done


async def test_finish_settles_the_quota_with_the_real_usage_once(make) -> None:
    s = await make(backend("a"), quotas={"defaults": QuotaLimits(tokens_per_minute=TPM)})
    prompt = "x" * 40
    job = await admitted(s, ask(prompt, hint=100))
    await granted(job)
    reserved = reserve_tokens(len(prompt), 100, None)
    assert job.rate_limits is not None and job.rate_limits.tokens is not None
    assert job.rate_limits.tokens[:2] == (TPM, TPM - reserved)
    assert await tokens_held(s) == reserved
    job.finish(CallResult(True, tokens=7), {"prompt_tokens": 5, "completion_tokens": 7})
    assert job.hold is not None and job.hold.settled
    job.finish(CallResult(True, tokens=7), {"prompt_tokens": 500, "completion_tokens": 0})  # once only
    await settled(s)
    assert await tokens_held(s) <= 5 + 7  # the real count replaced the reservation
    assert await s.redis.zscore(QuotaKeys(s.keys.prefix, TENANT, "-").tenant_running, job.request.request_id) is None


async def test_a_job_never_granted_gives_its_whole_reservation_back(make) -> None:
    s = await make(backend("a"), quotas={"defaults": QuotaLimits(tokens_per_minute=TPM)})
    prompt = "x" * 40
    reserved = reserve_tokens(len(prompt), 100, None)
    first = await admitted(s, ask(prompt, hint=100))
    await granted(first)
    second = await admitted(s, ask(prompt, hint=100))
    waiting = await second.start()
    assert second.rate_limits is not None and second.rate_limits.tokens is not None
    assert second.rate_limits.tokens[1] <= TPM - 2 * reserved + 1  # both reservations held
    await eventually(lambda: s.queued_is(1))
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    second.finish(CallResult.client_gone(), None)
    await settled(s)
    assert await tokens_held(s) <= reserved  # only the first one's reservation stands


async def test_a_job_granted_without_known_usage_keeps_its_reservation(make) -> None:
    s = await make(backend("a"), quotas={"defaults": QuotaLimits(tokens_per_minute=TPM)})
    prompt = "x" * 40
    reserved = reserve_tokens(len(prompt), 100, None)
    job = await admitted(s, ask(prompt, hint=100))
    await granted(job)
    job.finish(CallResult.failed(), None)  # the stream broke: usage unknown
    assert job.hold is not None and job.hold.settled
    await settled(s)
    assert await tokens_held(s) == reserved  # unchanged: the reservation stands
    assert await s.redis.zscore(QuotaKeys(s.keys.prefix, TENANT, "-").tenant_running, job.request.request_id) is None


async def test_start_over_a_quota_is_refused_with_its_numbers_and_not_queued(make) -> None:
    s = await make(backend("a"), quotas={"defaults": QuotaLimits(requests_per_minute=1)})
    first = await admitted(s)
    await granted(first)
    second = await admitted(s)
    with pytest.raises(QuotaExceeded) as err:
        await second.start()
    assert err.value.limit == "requests"
    assert err.value.limits is not None and err.value.limits.requests is not None
    assert err.value.limits.requests[:2] == (1, 0)
    assert err.value.retry_after_s is not None and err.value.retry_after_s > 0
    assert await s.queued() == 0 and await s.busy("a") == 1
