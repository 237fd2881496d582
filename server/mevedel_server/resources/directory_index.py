"""Sorted directory listings for completion, reused while a directory is
unchanged.

A listing is one ``os.scandir`` of an open directory descriptor (names and
entry types, no file is opened) keeping directories and regular files only
(a symbolic link is never offered, as no walk lists one), sorted by each
name's canonical address spelling so a typed prefix selects a contiguous run
(``bisect``). It is reused while the directory's device, inode and
modification time are unchanged. A listing taken while the modification
time was still recent is not kept: a change within the same timestamp tick
could otherwise go unnoticed (the "racy" case).
"""

from __future__ import annotations

import bisect
import os
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..addresses import encode_component

#: A listing is cached only once the directory has been quiet this long.
SETTLE_NS = 2_000_000_000
CAPACITY = 64


@dataclass(frozen=True, slots=True)
class IndexedEntry:
    label: str
    name: str
    is_dir: bool


#: Completion answers remembered per listing: a user typing into one
#: directory asks for the same few prefixes again and again.
MEMO_CAPACITY = 32


@dataclass(frozen=True, slots=True)
class Listing:
    entries: tuple[IndexedEntry, ...]
    labels: tuple[str, ...]
    names: frozenset[str]
    #: Answers derived from exactly these entries. They die with the listing,
    #: so a changed directory can never serve an old answer.
    memo: OrderedDict = field(default_factory=OrderedDict, compare=False, hash=False, repr=False)

    def remembered(self, key: object) -> object | None:
        found = self.memo.get(key)
        if found is not None:
            self.memo.move_to_end(key)
        return found

    def remember(self, key: object, value: object) -> None:
        self.memo[key] = value
        while len(self.memo) > MEMO_CAPACITY:
            self.memo.popitem(last=False)

    def starting_with(self, partial: str) -> Iterator[IndexedEntry]:
        start = bisect.bisect_left(self.labels, partial)
        for index in range(start, len(self.entries)):
            if not self.labels[index].startswith(partial):
                return
            yield self.entries[index]


_EMPTY = Listing((), (), frozenset())


class DirectoryIndex:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._cache: OrderedDict[tuple[int, int], tuple[int, Listing]] = OrderedDict()

    def listing(self, directory_fd: int) -> Listing:
        """The listing of the open directory ``directory_fd`` (the caller's)."""
        try:
            info = os.fstat(directory_fd)
        except OSError:
            return _EMPTY
        identity = (info.st_dev, info.st_ino)
        cached = self._cache.get(identity)
        if cached is not None and cached[0] == info.st_mtime_ns:
            self._cache.move_to_end(identity)
            return cached[1]
        listing = _scan(directory_fd)
        if time.time_ns() - info.st_mtime_ns > SETTLE_NS:
            self._cache[identity] = (info.st_mtime_ns, listing)
            self._cache.move_to_end(identity)
            while len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
        else:
            self._cache.pop(identity, None)
        return listing


def _kind(entry: os.DirEntry) -> bool | None:
    """True for a directory, False for a regular file, None otherwise."""
    try:
        if entry.is_dir(follow_symlinks=False):
            return True
        if entry.is_file(follow_symlinks=False):
            return False
    except OSError:
        pass
    return None


def _scan(directory_fd: int) -> Listing:
    try:
        with os.scandir(directory_fd) as scan:
            found = [(entry.name, _kind(entry)) for entry in scan]
    except OSError:
        return _EMPTY
    raw = [(name, is_dir) for name, is_dir in found if is_dir is not None]
    entries = sorted((IndexedEntry(encode_component(name), name, is_dir) for name, is_dir in raw), key=lambda e: e.label)
    return Listing(tuple(entries), tuple(e.label for e in entries), frozenset(name for name, _d in raw))
