"""Waiting on work while watching the client (``until_disconnect``), the keep-alive
comments of a queued stream (``queued_comments``), and which client ids are echoed."""

from __future__ import annotations

import asyncio

import pytest

from gateway.request.context import (
    MAX_CLIENT_REQUEST_ID,
    StillQueued,
    client_request_id,
    new_request_id,
    queued_comments,
    until_disconnect,
)
from gateway.request.disconnect import ClientGone, DisconnectWatch
from tests.gateway.request.doubles import Client, FakeJob


def pending() -> asyncio.Future[str]:
    return asyncio.get_running_loop().create_future()


async def test_work_done_is_its_result_without_a_turn_of_the_loop() -> None:
    watch = DisconnectWatch(Client().receive)
    work = pending()
    work.set_result("granted")
    waiting = until_disconnect(watch, work, patience_s=0.0)
    with pytest.raises(StopIteration) as done:
        waiting.send(None)  # it never suspends: granted in the enqueue's reply, the request goes on at once
    assert done.value.value == "granted"
    assert await until_disconnect(watch, work) == "granted"
    watch.stop()


async def test_a_failure_of_the_work_is_raised() -> None:
    watch = DisconnectWatch(Client().receive)
    work = pending()
    work.set_exception(LookupError("evicted"))
    with pytest.raises(LookupError):
        await until_disconnect(watch, work)
    watch.stop()


async def test_patience_spent_leaves_the_work_running() -> None:
    watch = DisconnectWatch(Client().receive)
    work = pending()
    with pytest.raises(StillQueued):
        await until_disconnect(watch, work, patience_s=0.0)
    assert not work.done()  # still queued: the stream starts, the ticket stays
    work.set_result("later")
    assert await until_disconnect(watch, work) == "later"
    watch.stop()


async def test_the_client_leaving_cancels_the_work() -> None:
    client = Client()
    watch = DisconnectWatch(client.receive)
    work = pending()
    waiter = asyncio.ensure_future(until_disconnect(watch, work))
    client.leave()
    with pytest.raises(ClientGone):
        await waiter
    assert work.cancelled() and watch.gone


async def test_a_client_already_gone_cancels_the_work_at_once() -> None:
    client = Client()
    client.leave()
    watch = DisconnectWatch(client.receive)
    await watch.task
    work = pending()
    with pytest.raises(ClientGone):
        await until_disconnect(watch, work, patience_s=60.0)
    assert work.cancelled()


@pytest.mark.parametrize(
    ("position", "rate", "comment"),
    [
        (4, 2.0, b": queued position=4 eta_ms=2000\n\n"),
        (4, 0.0, b": queued position=4\n\n"),  # drain rate unknown: no estimate
        (None, 2.0, b": queued\n\n"),  # place unknown (Redis away, or just granted)
    ],
)
async def test_a_queued_stream_hears_its_place(position: int | None, rate: float, comment: bytes) -> None:
    job = FakeJob([], positions=[position], rate=rate)
    work = pending()
    comments = []
    async for block in queued_comments(job, work, every_s=60.0):
        comments.append(block)
        work.set_result("granted")
    assert comments == [comment]


async def test_no_comment_once_the_work_is_done() -> None:
    work = pending()
    work.set_result("granted")
    assert [c async for c in queued_comments(FakeJob([]), work, every_s=60.0)] == []


@pytest.mark.parametrize(
    ("value", "echoed"),
    [
        ("abc-123", True),
        ("x" * MAX_CLIENT_REQUEST_ID, True),
        ("x" * (MAX_CLIENT_REQUEST_ID + 1), False),
        ("has space", False),
        ("tab\there", False),
        ("é", False),
        ("", False),
        (None, False),
    ],
)
def test_only_a_printable_bounded_client_id_is_echoed(value: str | None, echoed: bool) -> None:
    assert client_request_id(value) == (value if echoed else None)


def test_our_request_ids_are_unique_and_printable() -> None:
    ids = {new_request_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(i.startswith("req-") and client_request_id(i) == i for i in ids)
