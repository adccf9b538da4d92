"""``Proxy.handle``: the order of one request's steps, with a fake job standing in for
the scheduler and a real backend on loopback. What each case pins: what the client gets
(status, body, headers), what the backend got, and what the job was told — each grant's
part ended once, the request finished once."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from gateway.errors import GatewayError
from gateway.request.disconnect import ClientGone
from gateway.request.proxy import Proxy
from gateway.request.relay import RelayResponse
from gateway.telemetry import semconv as sc
from gateway.upstream.client import Upstream
from scheduler.backends.backend import BackendConfig
from scheduler.errors import BackendOverloaded, DeadlineExceeded, NoBackend
from scheduler.types import CallResult
from tests.gateway.request.doubles import (
    ANSWER,
    DONE,
    FINISH,
    HELLO,
    ROLE,
    USAGE,
    Client,
    FakeJob,
    FakeScheduler,
    Seen,
    Traced,
    chat,
)

At = Callable[[str], BackendConfig]


def parts(job: FakeJob) -> list[tuple[str, CallResult]]:
    """Each part that ended: its backend and how it ended."""
    return [(e[1], e[2]) for e in job.told("end_part")]


def error_of(body: bytes) -> dict:
    return orjson.loads(body)["error"]


async def test_a_whole_answer_passes_through_with_our_headers_and_the_job_finishes_once(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    job = FakeJob([at("ok")])
    scheduler = FakeScheduler(job)
    req = chat()
    client = Client()

    response = await Proxy(scheduler, upstream).handle(client.request(), req, traced.context(client_id="mine"))

    assert response.status_code == 200 and response.body == ANSWER
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"] == "mine"  # the client's own id, echoed
    assert response.headers["x-triage-request-id"] == "req-1"  # ours, as the backend got it
    assert response.headers["x-triage-class"] == "short"
    assert response.headers["x-triage-backend"] == "ok"
    assert response.headers["x-triage-queue-ms"] == "250.0"
    (got,) = seen
    assert got.path == "/ok/v1/chat/completions" and got.body == req.raw  # sent unchanged
    assert got.headers["x-request-id"] == "req-1" and "traceparent" in got.headers
    (inp, spec), = scheduler.admitted
    assert inp.model == "m" and inp.tenant == "t1" and spec.request_id == "req-1"
    (backend, result), = parts(job)
    assert backend == "ok" and result.ok and result.status == 200 and result.tokens == 7
    (finish,) = job.told("finish")
    assert finish[1] == result and finish[2] == USAGE
    (call,) = traced.finished("CLIENT")
    assert call.attributes[sc.HTTP_STATUS] == 200 and call.attributes[sc.OUTPUT_TOKENS] == 7
    assert call.status.is_ok


async def test_a_failure_before_the_first_byte_is_retried_once_on_the_next_grant(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    spans_when_told: list[int] = []
    job = FakeJob([at("dead"), at("ok")])
    job.on_end_part = lambda: spans_when_told.append(len(traced.finished("CLIENT")))
    response = await Proxy(FakeScheduler(job), upstream).handle(Client().request(), chat(), traced.context())

    assert response.status_code == 200 and response.body == ANSWER
    assert response.headers["x-triage-backend"] == "ok"
    assert spans_when_told == [0, 1]  # each part: the job told (the slot back) before its span ends
    assert len(job.told("failed")) == 1
    assert [(b, r.ok) for b, r in parts(job)] == [("dead", False), ("ok", True)]
    assert len(job.told("finish")) == 1
    failed_call, ok_call = traced.finished("CLIENT")
    assert failed_call.attributes[sc.BACKEND] == "dead" and not failed_call.status.is_ok
    assert ok_call.attributes[sc.BACKEND] == "ok" and ok_call.status.is_ok
    assert len(seen) == 1


async def test_with_no_retry_to_be_had_a_failure_before_the_first_byte_is_a_502(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    job = FakeJob([at("dead"), at("ok")], retry=False)
    with pytest.raises(GatewayError) as caught:
        await Proxy(FakeScheduler(job), upstream).handle(Client().request(), chat(), traced.context())

    assert caught.value.status == 502 and caught.value.code == "bad_gateway"
    assert "closed the connection" in caught.value.message
    assert [(b, r.ok) for b, r in parts(job)] == [("dead", False)]
    (finish,) = job.told("finish")
    assert finish[2] is None  # no usage: nothing to settle
    assert seen == []  # the next backend was never called


async def test_a_retry_that_fails_too_is_a_502_and_no_second_retry_is_asked_for(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    spans_when_told: list[int] = []
    job = FakeJob([at("dead"), at("dead"), at("ok")])
    job.on_end_part = lambda: spans_when_told.append(len(traced.finished("CLIENT")))
    with pytest.raises(GatewayError) as caught:
        await Proxy(FakeScheduler(job), upstream).handle(Client().request(), chat(), traced.context())

    assert caught.value.status == 502
    assert spans_when_told == [0, 1]  # each part: the job told before its span ends
    assert len(job.told("failed")) == 1
    assert [(b, r.ok) for b, r in parts(job)] == [("dead", False), ("dead", False)]
    assert len(traced.finished("CLIENT")) == 2  # each attempt's span ended


async def test_a_backends_429_queues_the_request_again_and_the_client_never_sees_it(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    job = FakeJob([at("busy429"), at("ok")])
    ctx = traced.context()
    response = await Proxy(FakeScheduler(job), upstream).handle(Client().request(), chat(), ctx)
    ctx.trace.end(response.status_code)

    assert response.status_code == 200 and response.body == ANSWER
    assert job.told("back_off") == [("back_off", 429, 2.0)]  # the backend's Retry-After: 2
    assert [(b, r.ok, r.status) for b, r in parts(job)] == [("busy429", False, 429), ("ok", True, 200)]
    assert [s.mode for s in seen] == ["busy429", "ok"]
    (server,) = traced.finished("SERVER")
    (overloaded,) = [e for e in server.events if e.name == sc.EV_OVERLOADED]
    assert overloaded.attributes[sc.BACKEND] == "busy429" and overloaded.attributes[sc.HTTP_STATUS] == 429
    assert overloaded.attributes[sc.COOLDOWN_S] == 2.0


@pytest.mark.parametrize(
    ("mode", "give_up", "status", "retry_after", "cool_s"),
    [
        ("busy429", BackendOverloaded(429, 4.0), 429, 4.0, 2.0),
        ("busy503", BackendOverloaded(503, None), 503, 1.0, 1.0),  # no Retry-After: the default cool-down
    ],
)
async def test_when_the_job_can_wait_no_longer_the_client_gets_our_own_429_or_503(
    upstream: Upstream, at: At, traced: Traced, mode: str, give_up: BackendOverloaded, status: int,
    retry_after: float, cool_s: float,
) -> None:
    job = FakeJob([at(mode), at("ok")], give_up=give_up)
    with pytest.raises(GatewayError) as caught:
        await Proxy(FakeScheduler(job), upstream).handle(Client().request(), chat(), traced.context())

    assert caught.value.status == status and caught.value.code == "backend_overloaded"
    assert caught.value.retry_after_s == retry_after
    assert job.told("back_off") == [("back_off", status, cool_s)]
    assert [(b, r.status) for b, r in parts(job)] == [(mode, status)]
    assert len(job.told("finish")) == 1
    (call,) = traced.finished("CLIENT")
    assert call.attributes[sc.HTTP_STATUS] == status


async def test_a_backends_own_error_reaches_the_client_in_openais_shape_without_its_internals(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = FakeJob([at("bad400")])
    response = await Proxy(FakeScheduler(job), upstream).handle(Client().request(), chat(), traced.context())

    assert response.status_code == 400
    error = error_of(response.body)
    assert error["type"] == "invalid_request_error"
    assert b"Traceback" not in response.body and b"/srv" not in response.body
    (backend, result), = parts(job)
    assert result.ok and result.status == 400 and result.tokens is None  # the backend is not to blame


async def test_a_stream_is_relayed_whole_and_its_usage_settles_the_job(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    job = FakeJob([at("ok")])
    client = Client()
    response = await Proxy(FakeScheduler(job), upstream).handle(client.request(), chat(stream=True), traced.context())
    assert isinstance(response, RelayResponse)
    assert job.told("finish") == []  # the stream's end finishes it, not the handler
    await client.run(response)

    assert client.status == 200 and client.headers["x-triage-backend"] == "ok"
    assert client.body == ROLE + HELLO + FINISH + DONE  # the usage chunk it did not ask for is gone
    assert orjson.loads(seen[0].body)["stream_options"] == {"include_usage": True}  # asked for it upstream
    (finish,) = job.told("finish")
    result, usage = finish[1], finish[2]
    assert result.ok and result.tokens == 7 and usage == USAGE
    assert len(job.told("end_part")) == 1
    (call,) = traced.finished("CLIENT")
    assert call.attributes[sc.OUTPUT_TOKENS] == 7


async def test_a_stream_still_queued_shows_its_place_then_relays_with_its_queue_time_before_done(
    upstream: Upstream, at: At, traced: Traced
) -> None:
    job = FakeJob([at("ok")], start_done=False, positions=[3], rate=2.0)

    def on_body(block: bytes) -> None:
        if not job.waits[0].done():
            job.grant_now()  # the queue moves once the client has seen its place

    client = Client(on_body)
    proxy = Proxy(FakeScheduler(job), upstream)
    proxy.comment_after_s, proxy.comment_every_s = 0.0, 60.0  # start at once; one comment suffices
    response = await proxy.handle(client.request(), chat(stream=True), traced.context())
    await client.run(response)

    assert client.status == 200
    assert "x-triage-backend" not in client.headers  # the 200 went out before the grant
    assert client.blocks[0] == b": queued position=3 eta_ms=1500\n\n"
    assert client.body == (
        b": queued position=3 eta_ms=1500\n\n" + ROLE + HELLO + FINISH + b": x-triage-queue-ms=250.0\n\n" + DONE
    )
    (finish,) = job.told("finish")
    assert finish[2] == USAGE


async def test_a_stream_evicted_while_it_showed_its_place_ends_in_an_sse_error(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    job = FakeJob([at("ok")], start_done=False, positions=[None])

    def on_body(block: bytes) -> None:
        if not job.waits[0].done():
            job.waits[0].set_exception(DeadlineExceeded("waited too long"))

    client = Client(on_body)
    proxy = Proxy(FakeScheduler(job), upstream)
    proxy.comment_after_s, proxy.comment_every_s = 0.0, 60.0
    await client.run(await proxy.handle(client.request(), chat(stream=True), traced.context()))

    first, last = client.blocks
    assert first == b": queued\n\n"  # its place unknown: a plain keep-alive
    assert error_of(last.removeprefix(b"data: "))["code"] == "queue_timeout"
    assert seen == [] and job.told("end_part") == []
    assert len(job.told("finish")) == 1


async def test_the_client_leaving_while_queued_withdraws_the_ticket(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    job = FakeJob([at("ok")], start_done=False)
    client = Client()
    client.leave()
    with pytest.raises(ClientGone):
        await Proxy(FakeScheduler(job), upstream).handle(client.request(), chat(), traced.context())

    assert job.waits[0].cancelled()  # cancelling the wait withdraws the ticket
    assert job.told("end_part") == [] and seen == []
    (finish,) = job.told("finish")
    assert finish[1] == CallResult.client_gone() and finish[2] is None


async def test_a_client_leaving_a_queued_stream_withdraws_its_ticket(upstream: Upstream, at: At, traced: Traced) -> None:
    job = FakeJob([at("ok")], start_done=False)
    client = Client(lambda block: client.leave())  # gone once it has seen its place
    proxy = Proxy(FakeScheduler(job), upstream)
    proxy.comment_after_s, proxy.comment_every_s = 0.0, 60.0
    await client.run(await proxy.handle(client.request(), chat(stream=True), traced.context()))

    assert client.blocks == [b": queued position=3 eta_ms=1500\n\n"] and not client.ended
    assert job.waits[0].cancelled()  # the ticket is withdrawn
    assert job.told("end_part") == []
    (finish,) = job.told("finish")
    assert finish[2] is None
    (server,) = traced.finished("SERVER")  # the stream's end ended the request's trace
    assert server.attributes[sc.HTTP_STATUS] == 200


async def test_a_paused_stream_resumes_on_its_next_grant_as_one_response(
    upstream: Upstream, at: At, traced: Traced, seen: list[Seen]
) -> None:
    job = FakeJob([at("part"), at("ok")], may_pause=True)

    def on_body(block: bytes) -> None:
        if job.told("pause") == [] and b"Hello" in block:
            job.pause_now()  # its slot goes to more urgent work after its first token

    client = Client(on_body)
    ctx = traced.context()
    response = await Proxy(FakeScheduler(job), upstream).handle(client.request(), chat(stream=True), ctx)
    await client.run(response)

    # one response: the second part's role dropped, the pause kept alive by comments
    assert client.body == ROLE + HELLO + b": paused\n\n" + HELLO + FINISH + DONE
    first, continuation = (orjson.loads(s.body) for s in seen)
    assert [s.mode for s in seen] == ["part", "ok"]
    assert continuation["messages"] == [*first["messages"], {"role": "assistant", "content": "Hello"}]
    assert continuation["continue_final_message"] is True and continuation["add_generation_prompt"] is False
    assert job.told("watch") == [("watch", "part", 0), ("watch", "ok", 1)]  # each part from where it got
    assert job.told("passed_quantum") == [("passed_quantum", 1), ("passed_quantum", 2)]
    (_, paused), (_, resumed) = parts(job)
    assert paused.ok and paused.tokens is None  # a paused part: the backend not blamed, nothing learned
    assert resumed.ok and resumed.tokens == 8  # the whole response's length, what the predictor learns
    assert resumed.ttft_s is not None and resumed.ttft_s >= 0  # the resumed part's own first token
    (finish,) = job.told("finish")
    assert finish[2] == {"prompt_tokens": 4, "completion_tokens": 8, "total_tokens": 12}  # both parts summed
    (server,) = traced.finished("SERVER")
    names = [e.name for e in server.events if e.name in (sc.EV_PAUSED, sc.EV_RESUMED)]
    assert names == [sc.EV_PAUSED, sc.EV_RESUMED]  # one pause, one resume: each told once
    event = next(e for e in server.events if e.name == sc.EV_PAUSED)
    assert event.attributes[sc.PAUSE_REASON] == job.pause_reason  # why the scheduler paused it
    # the continuation re-read the prompt (4 tokens) and the text it carried (1)
    assert traced.telemetry.instruments.resume_prefill.series == {("ok",): 5}


@pytest.mark.parametrize(
    ("refusal", "evicted", "status", "code"),
    [
        (NoBackend("No backend serves the model 'm'."), None, 404, "model_not_found"),
        (None, DeadlineExceeded("waited too long"), 504, "queue_timeout"),
    ],
)
async def test_the_schedulers_refusal_or_eviction_is_its_answer(
    upstream: Upstream, at: At, traced: Traced, refusal: NoBackend | None, evicted: DeadlineExceeded | None,
    status: int, code: str,
) -> None:
    job = FakeJob([at("ok")], start_done=False)
    scheduler = FakeScheduler(job, refuse=refusal)
    if evicted is not None:
        async def start() -> object:
            job.events.append(("start",))
            future = job._wait(False)
            future.set_exception(evicted)
            return future

        job.start = start  # type: ignore[method-assign]
    with pytest.raises(GatewayError) as caught:
        await Proxy(scheduler, upstream).handle(Client().request(), chat(), traced.context())
    assert caught.value.status == status and caught.value.code == code
    assert job.told("end_part") == []
