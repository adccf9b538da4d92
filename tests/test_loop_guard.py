"""The loop guard finds a descriptor closed behind its loop's back, and only that."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import select
import selectors
import socket
from collections.abc import Iterator

from openai import AsyncOpenAI

from tests import loop_guard
from tests.loop_guard import Watched
from tests.support import MODEL


@contextlib.contextmanager
def watched_loop() -> Iterator[tuple[Watched, asyncio.AbstractEventLoop]]:
    """A selector loop on a watched selector, closed at the end."""
    selector = Watched()
    loop = asyncio.SelectorEventLoop(selector)
    try:
        yield selector, loop
    finally:
        loop.close()


def test_a_socket_closed_while_registered_is_stale_and_one_unregistered_first_is_not() -> None:
    with watched_loop() as (selector, loop):
        left, right = socket.socketpair()
        tidy, other = socket.socketpair()
        with right, other:
            loop.add_reader(left.fileno(), lambda: None)
            loop.add_reader(tidy.fileno(), lambda: None)
            fd = left.fileno()
            left.close()  # behind the loop's back
            loop.remove_reader(tidy.fileno())
            tidy.close()
            stale = selector.stale()
            assert len(stale) == 1 and stale[0].startswith(f"fd {fd} "), stale
            assert selector.stale() == []  # reported once


def test_a_descriptor_number_reused_by_another_file_is_stale() -> None:
    with watched_loop() as (selector, loop):
        left, right = socket.socketpair()
        with left, right:
            loop.add_reader(left.fileno(), lambda: None)
            fd = left.fileno()
            os.dup2(right.fileno(), fd)  # the number now names another socket, still open
            stale = selector.stale()
            assert len(stale) == 1 and stale[0].startswith(f"fd {fd} "), stale
            loop.remove_reader(fd)


def test_a_stale_key_taken_over_by_a_new_socket_is_reported_and_the_new_socket_is_polled() -> None:
    with watched_loop() as (selector, loop):
        left, right = socket.socketpair()
        loop.add_reader(left.fileno(), lambda: None)
        fd = left.fileno()
        left.close()  # behind the loop's back: the kernel drops it from the epoll set, the key stays
        new, peer = socket.socketpair()
        with right, new, peer:
            took = new.fileno() == fd  # the lowest free number, as a rule
            if not took:
                os.dup2(new.fileno(), fd)  # a new socket takes the number
            loop.add_reader(fd, lambda: None)  # the key exists: this goes through modify
            peer.send(b"x")
            assert [key.fd for key, _ in selector.select(0)] == [fd]  # polled, not silently skipped
            found = loop_guard.stale_keys()
            assert len(found) == 1 and found[0].startswith(f"fd {fd} was registered"), found
            assert loop_guard.stale_keys() == []  # reported once
            loop.remove_reader(fd)
            if not took:
                os.close(fd)


def test_the_selectors_own_epoll_descriptor_closed_behind_its_back_is_stale() -> None:
    selector = Watched()
    left, right = socket.socketpair()
    try:
        with left, right:
            epfd = selector.fileno()
            assert selector.stale() == []
            os.dup2(left.fileno(), epfd)  # the epoll instance's number now names a socket
            assert selector.stale() == [f"the epoll descriptor {epfd} itself"]
            assert selector.stale() == []  # reported once
    finally:
        selector.close()


def test_a_key_whose_descriptor_left_the_epoll_set_shows_as_not_polled() -> None:
    with watched_loop() as (selector, loop):
        left, right = socket.socketpair()
        other, peer = socket.socketpair()
        with right, other, peer:
            loop.add_reader(left.fileno(), lambda: None)
            fd = left.fileno()
            assert loop_guard.polled()[loop_guard.socket_inode(fd)] == f"fd {fd} polled for events 1, in the epoll set"
            left.close()  # behind the loop's back: the kernel drops it from the epoll set
            os.dup2(other.fileno(), fd)  # and the number names another socket, never added
            view = loop_guard.polled()[loop_guard.socket_inode(fd)]
            assert view == f"fd {fd} polled for events 1, NOT in the epoll set", view
            loop.remove_reader(fd)
            os.close(fd)


def test_keys_the_kernel_does_not_poll_are_stale_when_the_epoll_descriptor_names_another_epoll() -> None:
    selector = Watched()
    other = select.epoll()
    left, right = socket.socketpair()
    try:
        with left, right:
            selector.register(left, selectors.EVENT_READ)
            assert selector.stale() == []
            os.dup2(other.fileno(), selector.fileno())  # same inode number: only the set tells
            found = selector.stale()
            assert len(found) == 1 and found[0].startswith(f"fd {left.fileno()} not in the kernel's epoll set"), found
            assert selector.stale() == []  # reported once
            selector.unregister(left)
    finally:
        selector.close()
        other.close()


def test_a_socket_no_loop_polls_says_who_last_stopped_polling_it() -> None:
    with watched_loop() as (selector, loop):
        left, right = socket.socketpair()
        with left, right:
            inode = loop_guard.socket_inode(left.fileno())
            assert inode is not None
            loop.add_reader(left.fileno(), lambda: None)
            loop.add_writer(left.fileno(), lambda: None)
            assert inode in loop_guard.polled()
            loop.remove_reader(left.fileno())  # through modify: the writer stays
            history = loop_guard.read_history(inode)
            assert f"fd {left.fileno()}:" in history
            on, off = history.split("; last unpolled ")
            assert "test_loop_guard.py" in on and "test_a_socket_no_loop_polls" in off, history
            loop.remove_writer(left.fileno())
            assert loop_guard.read_history(inode) == history  # a writer leaving is not a read
    assert loop_guard.read_history(10**12) == "no descriptor"


def test_a_transport_closed_after_its_socket_leaves_the_numbers_new_keys_alone_and_is_reported() -> None:
    with watched_loop() as (selector, loop), socket.create_server(("127.0.0.1", 0)) as server:
        old, _ = loop.run_until_complete(loop.create_connection(asyncio.Protocol, *server.getsockname()))
        fd = old.get_extra_info("socket").fileno()
        # its socket object is emptied behind it, as the collector's finalising does, while the
        # number lives on: a new connection (here the same socket, for no race on the number) takes it
        new, _ = loop.run_until_complete(loop.create_connection(asyncio.Protocol, sock=socket.socket(
            fileno=old._sock.detach())))  # type: ignore[attr-defined]
        assert selector.get_key(fd).data[0]._callback == new._read_ready  # type: ignore[attr-defined]
        old.abort()  # unguarded, this would remove the new connection's read key
        assert selector.get_key(fd).data[0]._callback == new._read_ready  # type: ignore[attr-defined]
        found = loop_guard.stale_keys()
        assert len(found) == 1 and f"fd {fd}," in found[0] and "test_loop_guard.py" in found[0], found
        new.close()
        loop.run_until_complete(asyncio.sleep(0))  # one turn: each connection_lost runs


async def test_an_unclosed_openai_client_collected_in_a_cycle_is_caught_when_its_late_close_runs(
    sim_url: str,
) -> None:
    """The cause of the suite's two-gateway hang: the client's sockets are finalised by the
    collector, and the close it schedules for itself runs later, on numbers maybe reused."""
    client = AsyncOpenAI(base_url=f"{sim_url}/v1", api_key="unused", max_retries=0)
    assert [m.id async for m in client.models.list()] == [MODEL]  # one pooled connection
    del client
    gc.collect()
    late = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "AsyncClient.aclose"]  # type: ignore[union-attr]
    assert len(late) == 1
    await late[0]
    found = loop_guard.stale_keys()
    assert len(found) == 1 and "closed behind it" in found[0] and "test_an_unclosed_openai" in found[0], found
