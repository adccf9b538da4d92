"""``Scheduler.admit``: a request's pool, placement and ticket, against a real registry
and dispatcher on a real Redis-protocol server."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from scheduler.errors import BackendsDown, NoBackend
from scheduler.job import SchedulerParams
from scheduler.policy.hints import HintParams, HintTrust
from scheduler.policy.order import PolicyName
from scheduler.predictor.prior import PriorPredictor
from scheduler.types import CallResult, LengthClass, PredictInput, Prediction, PredictionSource
from tests.scheduler.stack import TENANT, ScriptedProbe, Stack, ask, backend, request, running_stack


@pytest.fixture
async def make(any_redis_url: str, prefix: str) -> AsyncIterator[Callable[..., Awaitable[Stack]]]:
    async with contextlib.AsyncExitStack() as stacks:

        async def build(*configs: object, **kw: object) -> Stack:
            kw.setdefault("predictor", PriorPredictor(100.0))  # short, whatever the prompt
            return await stacks.enter_async_context(
                running_stack(any_redis_url, prefix, configs or (backend("a"),), **kw)  # type: ignore[arg-type]
            )

        yield build


async def test_an_unknown_model_has_no_backend(make) -> None:
    s = await make()
    with pytest.raises(NoBackend) as err:
        await s.scheduler.admit(ask(model="nope"), request())
    assert not isinstance(err.value, BackendsDown)
    assert "nope" in str(err.value)


async def test_a_model_whose_every_backend_is_down_past_the_grace_is_refused(make) -> None:
    s = await make(backend("a"), fail_threshold=1, probe=ScriptedProbe(down={"a"}))
    with pytest.raises(BackendsDown):
        await s.scheduler.admit(ask(), request())


@pytest.mark.parametrize(("timeout_s", "expected"), [(0.0, 60.0), (5.0, 5.0)])
async def test_within_the_grace_it_waits_no_longer_than_the_grace(make, timeout_s: float, expected: float) -> None:
    s = await make(backend("a"), fail_threshold=1, probe=ScriptedProbe(down={"a"}),
                   params=SchedulerParams("interactive", no_backend_grace_s=60.0))
    job = await s.scheduler.admit(ask(), request(timeout_s=timeout_s))
    assert 0 < job.ticket.timeout_s <= expected
    assert job.ticket.timeout_s > expected - 30  # what is left of the grace, not a fresh clock


async def test_the_ticket_carries_the_placement(make) -> None:
    s = await make(policy=PolicyName.SHORT_FIRST)
    job = await s.scheduler.admit(ask(), request())
    t = job.ticket
    assert (t.id, t.model, t.tenant, t.tier) == (job.request.request_id, "m", TENANT, "interactive")
    assert t.cls == job.cls == LengthClass.SHORT.value and t.predicted == 100
    assert t.slack_s == job.placement.order.slack_s == pytest.approx(2.0)  # 100 tokens x 0.02 s
    assert job.pool == "p" and t.age_s == 0.0 and t.pauses == 0


@pytest.mark.parametrize(
    ("case", "predicted", "tier", "restricted"),
    [
        ("short interactive work is open", 100.0, "interactive", False),
        ("long work is restricted", 5000.0, "interactive", True),
        ("batch work is restricted, however short", 100.0, "batch", True),
    ],
)
async def test_long_or_batch_work_is_restricted(make, case: str, predicted: float, tier: str, restricted: bool) -> None:
    s = await make(predictor=PriorPredictor(predicted))
    reservation = s.registry.reservations["p"]
    assert reservation.quiet  # no open work seen yet
    job = await s.scheduler.admit(ask(), request(tier=tier))
    assert job.ticket.restricted is restricted, case
    assert reservation.quiet is restricted, case  # an open arrival ends the quiet, restricted work does not


def doubted(params: HintParams) -> HintTrust:
    """A tenant whose hints ran long as often as it takes to lose the trust."""
    trust = HintTrust(params)
    for _ in range(20):
        if not trust.trusted(TENANT):
            return trust
        trust.observe(TENANT, 10, 1000)
    raise AssertionError("hints that always ran long kept the trust")


async def test_a_trusted_hint_is_the_prediction(make) -> None:
    s = await make(hints=HintTrust())
    job = await s.scheduler.admit(ask(hint=2000), request())
    assert job.inp.hint == 2000
    assert job.placement.prediction == Prediction(2000.0, 2000.0, PredictionSource.HINT)
    assert job.cls == LengthClass.LONG.value and job.ticket.restricted


async def test_a_doubted_hint_is_ignored_but_still_compared_with_the_reply(make) -> None:
    trust = doubted(HintParams())
    s = await make(hints=trust)
    job = await s.scheduler.admit(ask(hint=2000), request())
    assert job.inp.hint is None  # what the predictor saw
    assert job.placement.prediction.source is PredictionSource.PRIOR and job.placement.prediction.tokens == 100.0
    assert job.cls == LengthClass.SHORT.value
    await (await job.start())
    before = trust.record(TENANT)
    assert before is not None
    job.finish(CallResult(True, tokens=1500), None)  # the reply bore the hint out
    after = trust.record(TENANT)
    assert after is not None and after.seen == before.seen + 1 and after.long_share < before.long_share


async def test_a_tenant_whose_hints_hold_again_wins_the_trust_back(make) -> None:
    trust = doubted(HintParams())
    s = await make(hints=trust)
    for _ in range(20):  # replies within their hints, each compared though the hint was ignored
        job = await s.scheduler.admit(ask(hint=50), request())
        assert job.inp.hint is None
        await (await job.start())
        job.finish(CallResult(True, tokens=40), None)
        if trust.trusted(TENANT):
            break
    assert trust.trusted(TENANT)
    job = await s.scheduler.admit(ask(hint=50), request())
    assert job.inp.hint == 50 and job.placement.prediction.source is PredictionSource.HINT


async def test_the_oracle_length_is_honoured_under_the_oracle_policy(make) -> None:
    s = await make(policy=PolicyName.ORACLE)
    job = await s.scheduler.admit(ask(), request(oracle_tokens=3000))
    assert job.placement.prediction.source is PredictionSource.ORACLE
    assert job.cls == LengthClass.LONG.value and job.ticket.predicted == 3000


class Blocking(PriorPredictor):
    """A predictor that says it runs a network: it must be asked off the event loop."""

    blocking = True

    def __init__(self) -> None:
        super().__init__(100.0)
        self.threads: list[int] = []

    def predict(self, inp: PredictInput) -> Prediction:
        self.threads.append(threading.get_ident())
        return super().predict(inp)


async def test_a_blocking_predictor_is_asked_in_a_worker_thread(make) -> None:
    predictor = Blocking()
    s = await make(predictor=predictor)
    job = await s.scheduler.admit(ask(), request())
    assert job.placement.prediction.tokens == 100.0
    assert predictor.threads and threading.get_ident() not in predictor.threads
