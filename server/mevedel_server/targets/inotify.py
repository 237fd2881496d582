"""Linux inotify through libc: the calls, the event bits and the parsing of
what the descriptor reads. Shared by the tree watch of the file-state record
(:mod:`.tree_watch`) and the store's session watcher
(:mod:`.loop_watch`), each of which decides what
to watch and what an event means."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import sys
from collections.abc import Iterator

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
#: What both watchers ask for: entries created, deleted, moved, written or
#: changed, and the watched directory itself deleted or moved.
CHANGES = (
    IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB
    | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
)
_EVENT = struct.Struct("iIII")

_libc: ctypes.CDLL | bool | None = None


def libc() -> ctypes.CDLL | None:
    """libc with ``inotify_init1``, ``inotify_add_watch`` and
    ``inotify_rm_watch`` typed, or None where there is no inotify."""
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            try:
                found = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
                found.inotify_init1.argtypes = [ctypes.c_int]
                found.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
                found.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
                _libc = found
            except (OSError, AttributeError):
                pass
    return _libc or None


def inotify_available() -> bool:
    return libc() is not None


def events(data: bytes) -> Iterator[tuple[int, int, str]]:
    """``(watch descriptor, mask, name)`` of each event one read returned."""
    offset = 0
    while offset + _EVENT.size <= len(data):
        wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
        name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
        offset += _EVENT.size + length
        yield wd, mask, os.fsdecode(name)
