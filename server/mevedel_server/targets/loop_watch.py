"""Linux inotify on the event loop, for the store's session watcher
(:mod:`mevedel_server.store.watching.watch`).

watchfiles' watch thread wakes once per debounce step to look for events
(about 0.2 % of a core per watched session at a 20 ms step, see
``bench/bench_follow.py``); an inotify descriptor registered with the loop's
``add_reader`` costs nothing until the kernel has an event for it. The events
of one read are delivered at once, as a ``watchfiles``-shaped ``{(kind,
path)}`` set (so the watcher classifies both sources alike): nothing waits
for the directory to fall quiet. A hand-over waits on two watches in a row,
and a trailing debounce on each was most of its latency, while a burst
costs little without one -- the watcher's subscriber calls are serial, and
any number of wakes during a call become one more call. Names ``ignored``
says are not changes (temporary files and clock probes, renamed or removed a
moment later) are dropped here.

``recursive`` watches the directory and its subdirectories one level down,
including ones created later (``.lease/requests/`` is flat).
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
from collections.abc import Callable

from .inotify import (
    CHANGES,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    events,
)
from .inotify import libc as inotify_libc

__all__ = ["InotifyWatch"]

#: watchfiles' change kinds: added, modified, deleted.
_ADDED, _MODIFIED, _DELETED = 1, 2, 3
_MASK = CHANGES | IN_DONT_FOLLOW


class InotifyWatch:
    """One directory (and, if ``recursive``, its subdirectories) watched on
    ``loop`` until :meth:`close`; ``deliver(changes)`` runs on the loop."""

    def __init__(
        self,
        path: str,
        *,
        recursive: bool,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[set[tuple[int, str]]], None],
        ignored: Callable[[str], bool] = lambda _name: False,
    ) -> None:
        libc = inotify_libc()
        if libc is None:
            raise OSError(errno.ENOSYS, "inotify is not available")
        self._libc = libc
        self._loop = loop
        self._deliver = deliver
        self._ignored = ignored
        self._recursive = recursive
        self._root = path
        self._dirs: dict[int, str] = {}
        self._changes: set[tuple[int, str]] = set()
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._fd = fd
        try:
            self._add(path)
            if recursive:
                with os.scandir(path) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                            self._add(entry.path)
        except BaseException:
            os.close(fd)
            raise
        loop.add_reader(fd, self._readable)

    def _add(self, path: str) -> None:
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), _MASK)
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_add_watch failed: {os.strerror(code)}")
        self._dirs[wd] = path

    def close(self) -> None:
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return
        except OSError:
            self._changes.add((_MODIFIED, self._root))  # unreadable: look again
            self._flush()
            return
        for wd, mask, name in events(data):
            self._event(wd, mask, name)
        self._flush()

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self._changes.add((_MODIFIED, self._root))  # events were lost: look again
            return
        directory = self._dirs.get(wd)
        if directory is None:
            return
        if mask & IN_IGNORED:
            self._dirs.pop(wd, None)
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            self._changes.add((_DELETED, directory))
            return
        if name and self._ignored(name):
            return
        path = os.path.join(directory, name) if name else directory
        kind = _ADDED if mask & (IN_CREATE | IN_MOVED_TO) else _DELETED if mask & (IN_DELETE | IN_MOVED_FROM) else _MODIFIED
        self._changes.add((kind, path))
        if self._recursive and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO) and directory == self._root:
            try:
                self._add(path)
            except OSError:
                pass  # gone again already; its creation is reported

    def _flush(self) -> None:
        changes, self._changes = self._changes, set()
        if changes and self._fd >= 0:
            self._deliver(changes)
