"""A file descriptor closed behind an event loop's back, caught in the test that closed it.

An asyncio selector loop keeps a key per registered file descriptor. When a descriptor is
closed without being unregistered, the kernel drops it from the epoll set but the loop keeps
its key; the next socket given that number (a client's connection in a later test, on the
session's shared loop) is then "registered" by replacing the key's data, with no system
call, and is never polled: its reads hang with its answer already in the kernel's queue.

Every selector the tests' loops make is a ``Watched`` one, which remembers which file each
registered descriptor was; after each test, ``stale`` lists the keys whose descriptor has
since been closed or now names another file, and the test fails on them.
"""

from __future__ import annotations

import os
import selectors
import weakref
from typing import Any

_live: weakref.WeakSet[Watched] = weakref.WeakSet()


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
        _live.add(self)

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = super().register(fileobj, events, data)
        self.files[key.fd] = _identity(key.fd)
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = super().unregister(fileobj)
        self.files.pop(key.fd, None)
        return key

    def stale(self) -> list[str]:
        """The keys whose descriptor no longer names the file that was registered."""
        found = []
        for key in list((self.get_map() or {}).values()):
            now = _identity(key.fd)
            if now != self.files.get(key.fd):
                found.append(f"fd {key.fd} (events {key.events}, {key.data!r})")
                self.files[key.fd] = now  # reported once
        return found


def install() -> None:
    """Make every selector loop created from now on use ``Watched`` (asyncio reads
    ``selectors.DefaultSelector`` when a loop is made)."""
    if hasattr(selectors, "EpollSelector"):
        selectors.DefaultSelector = Watched  # type: ignore[misc]


def stale_keys() -> list[str]:
    """Stale keys of every live watched selector (a closed loop's selector has no map)."""
    found = []
    for selector in list(_live):
        try:
            found += selector.stale()
        except (RuntimeError, AttributeError):  # closed meanwhile
            continue
    return found
