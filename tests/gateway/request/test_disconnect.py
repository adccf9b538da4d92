"""``DisconnectWatch``: one watcher per request turns the client leaving into
``ClientGone`` inside ``guard()``; any other cancellation passes through unchanged."""

from __future__ import annotations

import asyncio

import pytest

from gateway.request.disconnect import ClientGone, DisconnectWatch
from tests.gateway.request.doubles import Client


async def test_the_client_leaving_inside_guard_is_client_gone() -> None:
    client = Client()
    watch = DisconnectWatch(client.receive)
    entered = asyncio.Event()

    async def wait_for_backend() -> None:
        with watch.guard():
            entered.set()
            await asyncio.Event().wait()  # a backend that never answers

    task = asyncio.ensure_future(wait_for_backend())
    await entered.wait()
    client.leave()
    with pytest.raises(ClientGone):
        await task
    assert watch.gone
    assert task.cancelling() == 0  # the watch's cancellation was taken back


async def test_another_cancellation_passes_through_guard_unchanged() -> None:
    watch = DisconnectWatch(Client().receive)
    entered = asyncio.Event()

    async def wait_for_backend() -> None:
        with watch.guard():
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(wait_for_backend())
    await entered.wait()
    task.cancel()  # a server shutting down, say
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not watch.gone
    watch.stop()


async def test_guard_refuses_at_once_when_the_client_has_gone() -> None:
    client = Client()
    client.leave()
    watch = DisconnectWatch(client.receive)
    await watch.task
    with pytest.raises(ClientGone), watch.guard():
        pytest.fail("the block must not run")


async def test_a_disconnect_after_stop_is_the_responses_end_not_a_client_leaving() -> None:
    messages: asyncio.Queue[dict] = asyncio.Queue()
    watch = DisconnectWatch(messages.get)
    task = watch.task
    watch.stop()
    watch.stop()  # safe twice
    await messages.put({"type": "http.disconnect"})
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not watch.gone


async def test_other_messages_are_not_a_disconnect() -> None:
    messages: asyncio.Queue[dict] = asyncio.Queue()
    watch = DisconnectWatch(messages.get)
    await messages.put({"type": "http.request", "body": b"", "more_body": False})
    await messages.put({"type": "http.disconnect"})
    await watch.task
    assert watch.gone
