"""Sorted directory listings for completion, reused while a directory is
unchanged.

A listing is one ``os.scandir`` of an open directory descriptor (names and
entry types, no file is opened) keeping directories and regular files only
(a symbolic link is never offered, as no walk lists one), sorted by each
name's canonical address spelling so a typed prefix selects a contiguous run
(``bisect``). It is reused while the directory's device, inode and
modification time are unchanged. A listing taken while the modification
time was still recent is never served as it is: a change within the same
timestamp tick could otherwise go unnoticed (the "racy" case); the directory
is read again, reusing the entries of the names it still holds, so that a
change costs a scan of the names, not the encoding and sorting of them all.
"""

from __future__ import annotations

import bisect
import heapq
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...addresses import encode_component
from ...targets import inotify

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
    """Listings of the directories completion reads, kept current.

    Where Linux inotify is to be had, every cached directory is watched
    (through its open descriptor, ``/proc/self/fd/N``, so the watch is on
    the directory opened, never on what a link leads to) and each request
    first drains the queue: the kernel queues an event with the change
    itself, so a drained queue names every change made before the request.
    A changed name is looked at alone (one ``lstat``) and its entry put in or
    taken out of the sorted listing: a file added to 10,000 costs that, not
    a scan. A lost queue (overflow) forgets every listing. Without inotify,
    a directory whose modification time moved (or is still recent: the
    "racy" case) is scanned again, built on the entries it had."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        #: identity -> (modification time, listing, settled): without a
        #: watch, an unsettled listing is never served as it is.
        self._cache: OrderedDict[tuple[int, int], tuple[int, Listing, bool]] = OrderedDict()
        self._inotify: int | None = None
        self._watches: dict[int, tuple[int, int]] = {}
        self._watched: dict[tuple[int, int], int] = {}
        #: identity -> names changed since its listing (None: rescan it).
        self._dirty: dict[tuple[int, int], set[str] | None] = {}
        self._started = False

    def listing(self, directory_fd: int) -> Listing:
        """The listing of the open directory ``directory_fd`` (the caller's)."""
        try:
            info = os.fstat(directory_fd)
        except OSError:
            return _EMPTY
        identity = (info.st_dev, info.st_ino)
        self._drain()
        cached = self._cache.get(identity)
        if cached is not None and identity in self._watched:
            dirty = self._dirty.pop(identity, set())
            listing = cached[1]
            if dirty is None:
                listing = _scan(directory_fd, listing)
            elif dirty:
                listing = _patched(directory_fd, listing, dirty)
            if listing is not cached[1]:
                self._cache[identity] = (info.st_mtime_ns, listing, True)
            self._cache.move_to_end(identity)
            return listing
        if cached is not None and cached[2] and cached[0] == info.st_mtime_ns:
            self._cache.move_to_end(identity)
            return cached[1]
        # Watched from before the scan, so nothing done after the scan began
        # is missed; a change it races is looked at again, harmlessly.
        watching = self._watch(directory_fd, identity)
        self._dirty.pop(identity, None)
        # A changed (or still recent) directory is read again, names and
        # types only; the entries it had are reused, so only new names are
        # encoded and sorted.
        listing = _scan(directory_fd, cached[1] if cached is not None else None)
        settled = watching or time.time_ns() - info.st_mtime_ns > SETTLE_NS
        self._cache[identity] = (info.st_mtime_ns, listing, settled)
        self._cache.move_to_end(identity)
        while len(self._cache) > self._capacity:
            evicted, _entry = self._cache.popitem(last=False)
            self._unwatch(evicted)
        return listing

    # -- inotify ---------------------------------------------------------------

    def _watch(self, directory_fd: int, identity: tuple[int, int]) -> bool:
        if identity in self._watched:
            return True
        if not self._started:
            self._started = True
            lib = inotify.libc()
            if lib is not None:
                fd = lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
                self._inotify = fd if fd >= 0 else None
        if self._inotify is None:
            return False
        lib = inotify.libc()
        assert lib is not None
        wd = lib.inotify_add_watch(self._inotify, b"/proc/self/fd/%d" % directory_fd, _MASK)
        if wd < 0:
            return False
        self._watches[wd] = identity
        self._watched[identity] = wd
        return True

    def _unwatch(self, identity: tuple[int, int]) -> None:
        wd = self._watched.pop(identity, None)
        self._dirty.pop(identity, None)
        if wd is not None and self._inotify is not None:
            self._watches.pop(wd, None)
            lib = inotify.libc()
            if lib is not None:
                lib.inotify_rm_watch(self._inotify, wd)

    def _drain(self) -> None:
        if self._inotify is None or not self._watches:
            return
        while True:
            try:
                data = os.read(self._inotify, 256 * 1024)
            except BlockingIOError:
                return
            except OSError:
                self._forget_all()
                return
            for wd, mask, name in inotify.events(data):
                if mask & inotify.IN_Q_OVERFLOW:
                    self._forget_all()
                    continue
                identity = self._watches.get(wd)
                if identity is None:
                    continue
                if mask & (inotify.IN_IGNORED | inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF | inotify.IN_UNMOUNT):
                    self._cache.pop(identity, None)
                    self._watches.pop(wd, None)
                    self._watched.pop(identity, None)
                    self._dirty.pop(identity, None)
                    continue
                dirty = self._dirty.setdefault(identity, set())
                if dirty is not None and name:
                    dirty.add(name)
                    if len(dirty) > _PATCH_LIMIT:
                        self._dirty[identity] = None  # many changes: one scan is cheaper

    def _forget_all(self) -> None:
        for identity in list(self._watched):
            self._unwatch(identity)
        self._cache.clear()


#: What the index watches: names added, removed or moved, the directory itself going.
_MASK = (
    inotify.IN_CREATE | inotify.IN_DELETE | inotify.IN_MOVED_FROM | inotify.IN_MOVED_TO
    | inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF | inotify.IN_ONLYDIR
)
#: Past this many changed names a directory is scanned again instead.
_PATCH_LIMIT = 256


def _patched(directory_fd: int, listing: Listing, names: set[str]) -> Listing:
    """``listing`` with each of ``names`` looked at again (one ``lstat``)."""
    kinds: dict[str, bool | None] = {}
    for name in names:
        try:
            mode = os.stat(name, dir_fd=directory_fd, follow_symlinks=False).st_mode
        except OSError:
            kinds[name] = None
            continue
        kinds[name] = True if stat.S_ISDIR(mode) else False if stat.S_ISREG(mode) else None
    entries = [e for e in listing.entries if e.name not in kinds]
    added = sorted((IndexedEntry(encode_component(n), n, d) for n, d in kinds.items() if d is not None), key=lambda e: e.label)
    for entry in added:
        bisect.insort(entries, entry, key=lambda e: e.label)
    present = (listing.names - kinds.keys()) | {n for n, d in kinds.items() if d is not None}
    return Listing(tuple(entries), tuple(e.label for e in entries), frozenset(present))


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


def _scan(directory_fd: int, previous: Listing | None = None) -> Listing:
    try:
        with os.scandir(directory_fd) as scan:
            found = {entry.name: _kind(entry) for entry in scan}
    except OSError:
        return _EMPTY
    kinds = {name: is_dir for name, is_dir in found.items() if is_dir is not None}
    if previous is None:
        entries = sorted((IndexedEntry(encode_component(n), n, d) for n, d in kinds.items()), key=lambda e: e.label)
    else:
        kept = [e for e in previous.entries if kinds.get(e.name) is e.is_dir]
        known = {e.name for e in kept}
        added = sorted(
            (IndexedEntry(encode_component(n), n, d) for n, d in kinds.items() if n not in known), key=lambda e: e.label
        )
        entries = list(heapq.merge(kept, added, key=lambda e: e.label)) if added else kept
    return Listing(tuple(entries), tuple(e.label for e in entries), frozenset(kinds))
