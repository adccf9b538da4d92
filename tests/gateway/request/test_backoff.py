"""``Backoff``: a backend's 429/503 before the first byte is backpressure. The refusal is
read and closed, the backend cools down for what its ``Retry-After`` asks (bounded), the
job queues again, and the client hears of it only when the job can wait no longer."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from gateway.errors import GatewayError
from gateway.request.backoff import Backoff
from gateway.request.disconnect import ClientGone, DisconnectWatch
from gateway.request.exchange import Exchange
from gateway.telemetry import semconv as sc
from gateway.upstream.client import Upstream
from gateway.upstream.refusal import Cooldown
from scheduler.backends.backend import BackendConfig
from scheduler.errors import BackendOverloaded, DeadlineExceeded
from tests.gateway.request.doubles import Client, FakeJob, Traced, chat

At = Callable[[str], BackendConfig]


@pytest.mark.parametrize(("status", "applies"), [(429, True), (503, True), (200, False), (500, False), (502, False)])
def test_only_a_busy_backends_answer_is_backpressure(status: int, applies: bool) -> None:
    assert Backoff().applies(httpx.Response(status)) is applies


async def refusal(upstream: Upstream, at: At, traced: Traced, job: FakeJob, stream: bool = False) -> tuple[Exchange, httpx.Response]:
    (await job.start()).result()
    ex = Exchange(upstream, chat(stream=stream), traced.context())
    return ex, await ex.open(job)


async def test_requeue_reads_the_refusal_cools_the_backend_within_bounds_and_queues_again(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = FakeJob([at("busy429"), at("ok")])
    ex, response = await refusal(upstream, at, traced, job, stream=True)

    waiting = await Backoff(Cooldown(default_s=0.5, max_s=1.5)).requeue(job, ex, response)

    assert waiting.done() and waiting.result().backend == "ok"
    assert response.is_closed and response.content.startswith(b'{"error"')  # read whole, then closed
    assert job.told("back_off") == [("back_off", 429, 1.5)]  # Retry-After: 2, bounded at 1.5
    (call,) = traced.finished("CLIENT")
    assert call.attributes[sc.HTTP_STATUS] == 429
    ex.ctx.trace.end(200)
    (server,) = traced.finished("SERVER")
    assert [e.attributes[sc.COOLDOWN_S] for e in server.events if e.name == sc.EV_OVERLOADED] == [1.5]


@pytest.mark.parametrize(("mode", "status"), [("busy429", 429), ("busy503", 503)])
async def test_requeue_gives_our_own_answer_when_the_job_can_wait_no_longer(
    upstream: Upstream, at: At, traced: Traced, mode: str, status: int
) -> None:
    job = FakeJob([at(mode)], give_up=BackendOverloaded(status, 3.0))
    ex, response = await refusal(upstream, at, traced, job)

    with pytest.raises(GatewayError) as caught:
        await Backoff().requeue(job, ex, response)

    assert caught.value.status == status and caught.value.code == "backend_overloaded"
    assert caught.value.retry_after_s == 3.0
    assert len(job.told("end_part")) == 1
    assert len(traced.finished("CLIENT")) == 1  # the call's span ended all the same
    assert ex.call is None


async def test_again_waits_for_the_next_grant_and_forgets_the_refusal(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = FakeJob([at("busy503"), at("ok")])
    ex, response = await refusal(upstream, at, traced, job)
    client = Client()
    watch = DisconnectWatch(client.receive)

    await Backoff().again(watch, job, ex, response)

    assert ex.response is None  # the refusal is no longer this request's answer
    assert job.grant is not None and job.grant.backend == "ok"
    watch.stop()


async def test_again_ends_when_the_client_leaves_and_withdraws_the_ticket(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = FakeJob([at("busy503"), at("ok")], back_off_done=False)
    ex, response = await refusal(upstream, at, traced, job)
    client = Client()
    client.leave()

    with pytest.raises(ClientGone):
        await Backoff().again(DisconnectWatch(client.receive), job, ex, response)

    assert job.waits[-1].cancelled()


async def test_again_answers_an_eviction_while_queued_again(upstream: Upstream, at: At, traced: Traced) -> None:
    job = FakeJob([at("busy503"), at("ok")], evicted=DeadlineExceeded("waited too long"))
    ex, response = await refusal(upstream, at, traced, job)
    watch = DisconnectWatch(Client().receive)

    with pytest.raises(GatewayError) as caught:
        await Backoff().again(watch, job, ex, response)

    watch.stop()
    assert caught.value.status == 504 and caught.value.code == "queue_timeout"


async def test_in_a_stream_it_keeps_the_client_company_while_queued_again(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = FakeJob([at("busy429"), at("ok")], back_off_done=False, positions=[2], rate=4.0)
    ex, response = await refusal(upstream, at, traced, job, stream=True)
    blocks = []
    async for block in Backoff().again_in_stream(job, ex, response, every_s=60.0):
        blocks.append(block)
        job.grant_now()  # granted once the client has heard where it stands

    assert blocks == [b": queued position=2 eta_ms=500\n\n"]
    assert ex.response is None and job.grant is not None and job.grant.backend == "ok"


async def test_in_a_stream_giving_up_is_one_sse_error_event(upstream: Upstream, at: At, traced: Traced) -> None:
    job = FakeJob([at("busy503")], give_up=BackendOverloaded(503, None))
    ex, response = await refusal(upstream, at, traced, job, stream=True)

    blocks = [block async for block in Backoff().again_in_stream(job, ex, response, every_s=60.0)]

    (block,) = blocks
    assert block.startswith(b"data: ") and b'"code":"backend_overloaded"' in block
    assert ex.response is response  # it stays the refusal's: the stream ends here
