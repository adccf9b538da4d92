"""The loop guard finds a descriptor closed behind its loop's back, and only that."""

from __future__ import annotations

import asyncio
import os
import socket

from tests.loop_guard import Watched


def test_a_socket_closed_while_registered_is_stale_and_one_unregistered_first_is_not() -> None:
    selector = Watched()
    loop = asyncio.SelectorEventLoop(selector)
    try:
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
    finally:
        loop.close()


def test_a_descriptor_number_reused_by_another_file_is_stale() -> None:
    selector = Watched()
    loop = asyncio.SelectorEventLoop(selector)
    try:
        left, right = socket.socketpair()
        with left, right:
            loop.add_reader(left.fileno(), lambda: None)
            fd = left.fileno()
            os.dup2(right.fileno(), fd)  # the number now names another socket, still open
            stale = selector.stale()
            assert len(stale) == 1 and stale[0].startswith(f"fd {fd} "), stale
            loop.remove_reader(fd)
    finally:
        loop.close()
