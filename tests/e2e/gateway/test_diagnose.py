"""The hang diagnostics read the bytes where they lie: the kernel's queues and uvicorn's state."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

from simulator.testing import running_simulator
from tests.e2e.gateway.diagnose import process_sockets, server_connections, sockets


@contextlib.contextmanager
def unread_hello() -> Iterator[tuple[int, int]]:
    """A listener's port and a client's, the client with five bytes it never reads."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            with accepted:
                accepted.sendall(b"hello")
                yield port, client.getsockname()[1]


def test_bytes_sent_and_not_read_show_in_the_readers_receive_queue() -> None:
    with unread_hello() as (port, client_port):
        lines = sockets([f"http://127.0.0.1:{port}"])
        waiting = [line for line in lines if line.startswith(f"{client_port}->{port} ")]
        assert waiting and "recv_q=5" in waiting[0], lines
        assert not any(line.startswith(f"{port}->") and "recv_q=5" in line for line in lines)


def test_a_connection_never_accepted_shows_in_the_listeners_accept_queue() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):  # the kernel completes it; nobody accepts
            assert f"{port} LISTEN accept_q=1" in sockets([f"http://127.0.0.1:{port}"])
            accepted, _ = listener.accept()
            with accepted:
                assert f"{port} LISTEN accept_q=0" in sockets([f"http://127.0.0.1:{port}"])


def test_the_process_sockets_are_every_socket_of_this_process_and_no_other() -> None:
    with unread_hello() as (port, mine):
        lines = process_sockets()
        assert any(line.startswith(f"{mine}->{port} ESTABLISHED") and "recv_q=5" in line for line in lines)
        assert f"{port} LISTEN accept_q=0" in lines
    assert not any(line.startswith(f"{mine}->") or line.startswith(f"{port} ") for line in process_sockets())


def test_a_uvicorn_connection_shows_its_requests_state() -> None:
    with running_simulator() as url, socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nhost: sim\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += conn.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200")
        mine = [line for line in server_connections() if f", {conn.getsockname()[1]})" in line]
        # the head is written after the cycle is marked started (its end may still be on its way)
        assert mine and "started=True" in mine[0] and "disconnected=False" in mine[0], server_connections()


async def test_a_connection_of_the_tests_loop_shows_how_that_loop_polls_it() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # a stream keeps its socket polled
        try:
            mine = writer.get_extra_info("sockname")[1]
            lines = [line for line in sockets([f"http://127.0.0.1:{port}"]) if line.startswith(f"{mine}->")]
            fd = writer.get_extra_info("socket").fileno()
            assert lines and f"(fd {fd} polled for events 1, in the epoll set)" in lines[0], lines
        finally:
            writer.close()
            await writer.wait_closed()
