"""A file descriptor closed behind an event loop's back, caught in the test that closed it.

An asyncio selector loop keeps a key per registered file descriptor. When a descriptor is
closed without being unregistered, the kernel drops it from the epoll set but the loop keeps
its key; the next socket given that number (a client's connection in a later test, on the
session's shared loop) is then "registered" by replacing the key's data, with no system
call, and is never polled: its reads hang with its answer already in the kernel's queue.

Every selector the tests' loops make is a ``Watched`` one, which remembers which file each
registered descriptor was; after each test, ``stale`` lists the keys whose descriptor has
since been closed or now names another file, and the test fails on them. A stale key can
also be reused and dropped within one test (asyncio streams from anyio unregister their
socket after every read, so a connection's next read goes through ``modify``, and a
request that then hangs is cancelled and closed before the test ends): ``modify`` checks
the descriptor's file first, and on a stale key registers the new file properly (it is
polled, so nothing hangs) and keeps what it found for the test's end.

A transport can also outlive its socket: a client left unclosed (the ``openai`` package's
client schedules its own close on the running loop when it is collected) is collected in a
cycle, the collector finalises its sockets (closing their descriptors) before the scheduled
close runs, a new connection takes a freed number, and the late close then removes that
number's keys, which are the new connection's: its reads hang with their answer waiting.
Every asyncio transport made while the guard is installed remembers the test code that made
it; one closed or aborted after its socket was closed behind it leaves the number's keys
alone and is reported, with where it was made, in the test in which it closed.
"""

from __future__ import annotations

import asyncio.selector_events
import os
import selectors
import sys
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

_live: weakref.WeakSet[Watched] = weakref.WeakSet()
_CLOSED = (RuntimeError, AttributeError, ValueError)  # what a selector closed meanwhile raises
_reused: list[str] = []  # stale keys that a new file was about to take over, as found
_orphans: list[str] = []  # transports closed after their sockets were closed behind them
# per descriptor number, the last time a watched selector began and stopped polling it for
# reads, and from where: a socket found with no key says who took its key away
_read_on: dict[int, str] = {}
_read_off: dict[int, str] = {}


def _where(depth: int = 7) -> str:
    """When, and the innermost callers outside this module (cheap: no source lines read)."""
    frame, parts = sys._getframe(2), []
    while frame is not None and len(parts) < depth:
        parts.append(_line(frame, frame.f_code.co_filename.rsplit("/", 1)[-1]))
        frame = frame.f_back
    return f"at {time.monotonic():.3f} by " + " < ".join(parts)


def _line(frame: Any, path: str) -> str:
    return f"{path}:{frame.f_lineno} {frame.f_code.co_name}"


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Watched(selectors.EpollSelector):
    """An epoll selector that remembers the file behind each registered descriptor."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[int, tuple[int, int] | None] = {}
        self.own = _identity(self.fileno())  # the epoll instance itself
        self.reported: set[int] = set()  # keys found stale: each reported once
        _live.add(self)

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = super().register(fileobj, events, data)
        self.files[key.fd] = _identity(key.fd)
        self.reported.discard(key.fd)
        if events & selectors.EVENT_READ:
            _read_on[key.fd] = _where()
        return key

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = self.get_key(fileobj)
        now = _identity(key.fd)
        if now == self.files.get(key.fd):
            if (key.events ^ events) & selectors.EVENT_READ:
                (_read_on if events & selectors.EVENT_READ else _read_off)[key.fd] = _where()
            return super().modify(fileobj, events, data)
        stack = "".join(traceback.format_stack(limit=14)[:-1])
        _reused.append(f"fd {key.fd} was registered for {key.data!r} and closed behind the loop's back; "
                       f"then another file took the number and was registered for {data!r} at\n{stack}")
        super().unregister(fileobj)  # the stale key (its epoll entry went with the old file)
        return self.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = super().unregister(fileobj)
        self.files.pop(key.fd, None)
        self.reported.discard(key.fd)
        if key.events & selectors.EVENT_READ:
            _read_off[key.fd] = _where()
        return key

    def stale(self) -> list[str]:
        """The keys whose descriptor no longer names the file that was registered; the keys
        the kernel's epoll set does not hold (never reported ready: what happens to every key
        if the selector's epoll descriptor came to name another epoll instance, which shares
        its inode number); and the selector's own descriptor if it names no epoll at all."""
        found: list[str] = []
        if self.get_map() is None:  # closed
            return found
        if self.own is not None and _identity(self.fileno()) != self.own:
            found.append(f"the epoll descriptor {self.fileno()} itself")
            self.own = None  # reported once
        kernel = epoll_set(self.fileno())
        for key in list(self.get_map().values()):
            if key.fd in self.reported:
                continue
            if _identity(key.fd) != self.files.get(key.fd):
                found.append(f"fd {key.fd} (events {key.events}, {key.data!r})")
                self.reported.add(key.fd)
            elif kernel is not None and key.fd not in kernel:
                found.append(f"fd {key.fd} not in the kernel's epoll set (events {key.events}, {key.data!r})")
                self.reported.add(key.fd)
        return found


def install() -> None:
    """Make every selector loop created from now on use ``Watched`` (asyncio reads
    ``selectors.DefaultSelector`` when a loop is made)."""
    if hasattr(selectors, "EpollSelector"):
        selectors.DefaultSelector = Watched  # type: ignore[misc]
    _guard_transports()


def _made_by_tests() -> str:
    """The test running (pytest names it) and the innermost frame of the tests' own code on
    the stack, if any (a connection made in a task of its own has none)."""
    return f"{os.environ.get('PYTEST_CURRENT_TEST', 'no test')}, {_tests_frame()}"


def _tests_frame() -> str:
    frame: Any = sys._getframe()
    while frame is not None:
        path = frame.f_code.co_filename
        if "/tests/" in path and not path.endswith("/tests/loop_guard.py"):
            return _line(frame, path.rsplit("/tests/", 1)[-1])
        frame = frame.f_back
    return "outside the tests' code"


def _closed_behind(transport: Any) -> bool:
    sock = transport._sock
    return sock is not None and sock.fileno() < 0 and not transport._closing and not transport._conn_lost


def _guard_transports() -> None:
    """Wrap asyncio's selector transports: each remembers the test code that made it; one
    closed or aborted after its socket was closed behind it leaves its old number's keys
    alone (the number may name a newer socket now) and is reported (``stale_keys``)."""
    cls: Any = asyncio.selector_events._SelectorTransport
    if getattr(cls, "_guarded", False):
        return
    made, force_close, close = cls.__init__, cls._force_close, cls.close

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self._made_at = _made_by_tests()
        made(self, *args, **kwargs)

    def _force_close(self: Any, exc: BaseException | None) -> None:
        if _closed_behind(self):
            _orphans.append(f"a transport (fd {self._sock_fd}, to {self._extra.get('peername')}, made at "
                            f"{getattr(self, '_made_at', '?')}) was closed after its socket had been closed "
                            f"behind it (a client left unclosed and collected?); it left the number's keys alone")
            self._closing = True  # so asyncio's own close removes no key of the number
            self._buffer.clear()
        force_close(self, exc)

    def guarded_close(self: Any) -> None:
        if _closed_behind(self):
            self._force_close(None)
        else:
            close(self)

    cls.__init__, cls._force_close, cls.close, cls._guarded = __init__, _force_close, guarded_close, True


def stale_keys() -> list[str]:
    """Stale keys of every live watched selector (a closed loop's selector has no map), the
    stale keys reused since the last call, and the transports closed since then after their
    sockets were closed behind them."""
    found = _reused + _orphans
    _reused.clear()
    _orphans.clear()
    for selector in list(_live):
        try:
            found += selector.stale()
        except _CLOSED:  # closed meanwhile
            continue
    return found


def epoll_set(epfd: int) -> dict[int, int] | None:
    """The descriptors an epoll instance of this process holds, with their event masks, as
    the kernel lists them (``/proc/self/fdinfo``; None where it cannot be read)."""
    try:
        text = Path(f"/proc/self/fdinfo/{epfd}").read_text()
    except OSError:
        return None
    held = {}
    for line in text.splitlines():
        if line.startswith("tfd:"):
            fields = line.split()
            held[int(fields[1])] = int(fields[3], 16)
    return held


def socket_inode(fd: int) -> int | None:
    """The inode of the socket behind ``fd`` (what ``/proc/net/tcp`` lists), or None."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return int(target[8:-1]) if target.startswith("socket:[") else None


def read_history(inode: int) -> str:
    """For a socket no watched selector polls: the last time a watched selector began and
    stopped polling its descriptor for reads, and from where (the number may have named
    another file then)."""
    fd = next((fd for fd, named in socket_descriptors().items() if named == inode), None)
    if fd is None:
        return "no descriptor"
    return f"fd {fd}: reads last polled {_read_on.get(fd, 'never')}; last unpolled {_read_off.get(fd, 'never')}"


def socket_descriptors() -> dict[int, int]:
    """Each descriptor of this process that names a socket, with the socket's inode."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return {}
    found = {int(n): socket_inode(int(n)) for n in names if n.isdigit()}
    return {fd: inode for fd, inode in found.items() if inode is not None}


def polled() -> dict[int, str]:
    """Each socket inode that a live watched selector has a key for: how it is polled (the
    key's events, and whether the kernel's epoll set holds its descriptor: a key the kernel
    lacks is never reported ready, whatever arrives)."""
    seen = {}
    for selector in list(_live):
        try:
            keys, epfd = list((selector.get_map() or {}).values()), selector.fileno()
        except _CLOSED:
            continue
        kernel = epoll_set(epfd) or {}
        for key in keys:
            inode = socket_inode(key.fd)
            if inode is not None:
                state = "in the epoll set" if key.fd in kernel else "NOT in the epoll set"
                seen[inode] = f"fd {key.fd} polled for events {key.events}, {state}"
    return seen
