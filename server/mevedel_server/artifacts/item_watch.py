"""Noticing what other processes do to the items open here.

An editor showing an item must learn when another server process (or the
CLI, or an agent's turn in another server) takes the item's lease, writes
it, or hands it back, or its buffer stays writable with old text until a
refused save reveals it. :class:`ItemWatches` watches each item it is told
about the way session following watches a session
(:class:`~mevedel_server.store.watching.watch.SessionWatcher`): the item's
lease directory (every whole-item write of a live item adds a generation
there, a hand-over request is a file there) and its authored directory
(the primary file), with inotify on a local workspace and one pure-read
program per tick otherwise (a listing of the lease directory and the
primary file's size and mtime). A wake is only a hint: the item's standing
is then read with the ordinary store reads (the lease head with the target
clock, the primary file's revision) and compared with the last one seen,
so a renewal (a new generation, same holder) tells nobody anything.

A change another process made is reported with ``changed(item_id, state)``;
one made here is reported by the store itself (``ArtifactStore.on_change``),
so a wake that follows this process's own change only updates what was
seen. The holder's side of a hand-over is here too: a request that appears
for an item held here is answered at once when the item has had no write
here for the idle time, else when it has (not at the next renewal).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..store import LEASE, SessionWatcher, Wake, WatchCadence
from ..targets import (
    ControlProgram,
    ListDir,
    Read,
    Stat,
    Status,
    TargetError,
    raise_for_result,
)
from .errors import ArtifactError
from .layout import ItemPaths
from .store import ArtifactStore, revision_of

_log = logging.getLogger(__name__)

#: Items watched at once per store; the least recently opened goes first.
MAX_WATCHED = 256


@dataclass(frozen=True)
class ItemState:
    """What an editor showing the item needs to know of it."""

    #: ``held`` (another process holds it), ``mine``, ``free`` or ``expired``.
    standing: str
    #: Who holds it, for people (set while ``held``).
    holder: str | None
    holder_host: str | None
    #: The primary file's revision (None: the item is gone).
    revision: str | None

    @property
    def writable(self) -> bool:
        return self.standing != "held"


class _DirectoryWatcher(SessionWatcher):
    """A :class:`SessionWatcher` of one directory given by its target path
    (watched recursively once it exists, its nearest existing ancestor
    until then); ``stat`` (a target path) adds that file's size and mtime
    to what a poll compares."""

    def __init__(self, target, directory: str, *, stat: str | None = None, **options) -> None:
        self._stat = stat
        super().__init__(target, directory, **options)

    def _place(self, directory: str) -> None:
        self._directory = directory

    @property
    def session_id(self) -> str:  # names the watch in wakes and logs
        return self._directory

    def _chain(self) -> list[str]:
        parts = self._directory.split("/")
        return ["", *("/".join(parts[: n + 1]) for n in range(len(parts)))]

    def _classify(self, watched: str, changes: set[tuple[int, str]]) -> set[str]:
        chain = self._chain()
        root = self._local(watched)
        reasons: set[str] = set()
        for _kind, path in changes:
            relative = os.path.relpath(path, root)
            parts = [] if relative == "." else relative.split(os.sep)
            if watched == chain[-1]:
                if not any(self._not_a_change(part) for part in parts):
                    reasons.add(LEASE)
                continue
            child = chain[chain.index(watched) + 1].rsplit("/", 1)[-1]
            if parts and parts[0] == child:
                reasons.add(LEASE)
        return reasons

    async def _listing(self):
        ops = [ListDir(self._directory, optional=True)]
        if self._stat is not None:
            ops.append(Stat(self._stat, optional=True))
        self.polls += 1
        try:
            result = await self.target.run(ControlProgram(ops))
        except TargetError as error:
            _log.info("item watch %s: poll failed: %s", self._directory, error)
            return None
        names = None
        if result[0].status is Status.OK:
            names = tuple(sorted(name for name in result[0].value if not name.startswith(".")))
        elif result[0].status is not Status.ABSENT:
            return None
        facts = None
        if self._stat is not None and result[1].status is Status.OK:
            # Not the whole-second mtime alone: another process's same-size
            # edit within the second would never wake the watch.
            stat = result[1].value
            facts = (stat.size, stat.mtime, stat.ino, stat.mtime_ns)
        # Compared as a pair, the second element never differs: any change is a lease wake.
        return (names, facts), None


class ItemWatches:
    """The items of one :class:`ArtifactStore` that editors have open here,
    each watched until forgotten (deleted) or pushed out by newer ones."""

    def __init__(
        self,
        store: ArtifactStore,
        changed: Callable[[str, ItemState], None],
        *,
        cadence: Callable[[], WatchCadence] = WatchCadence,
    ) -> None:
        self.store = store
        self._changed = changed
        self._cadence = cadence
        self._watched: OrderedDict[str, list[_DirectoryWatcher]] = OrderedDict()
        self._seen: dict[str, ItemState] = {}
        #: Items this process changed since their last wake.
        self._own: set[str] = set()
        self._answering: dict[str, asyncio.TimerHandle] = {}
        store.on_change.append(self._changed_here)

    def watching(self, item_id: str) -> bool:
        return item_id in self._watched

    async def watch(self, item_id: str, *, seen: ItemState | None = None) -> None:
        """Watch ``item_id`` (again: it becomes the most recent). ``seen``
        is what the editor was just given; without it the item is read."""
        if item_id in self._watched:
            self._watched.move_to_end(item_id)
            if seen is not None:
                self._seen[item_id] = seen
            return
        paths = ItemPaths(item_id)
        self._seen[item_id] = seen if seen is not None else await self.state(item_id)
        cadence = self._cadence()
        watchers = [
            _DirectoryWatcher(self.store.target, paths.lease_dir, stat=None, cadence=cadence),
        ]
        meta_primary = None
        try:
            meta, _ = await self.store.meta(item_id)
            meta_primary = paths.file(meta.primary)
        except ArtifactError:
            pass
        watchers.append(_DirectoryWatcher(self.store.target, paths.authored, stat=meta_primary, cadence=cadence))
        if item_id in self._watched:  # watched meanwhile (the awaits above)
            return
        self._watched[item_id] = watchers
        for watcher in watchers:
            watcher.subscribe(lambda wake, item_id=item_id: self._woken(item_id, wake))
            watcher.start()
        while len(self._watched) > MAX_WATCHED:
            oldest = next(iter(self._watched))
            await self.forget(oldest)

    async def forget(self, item_id: str) -> None:
        watchers = self._watched.pop(item_id, [])
        self._seen.pop(item_id, None)
        self._own.discard(item_id)
        timer = self._answering.pop(item_id, None)
        if timer is not None:
            timer.cancel()
        for watcher in watchers:
            await watcher.stop()

    async def close(self) -> None:
        for item_id in list(self._watched):
            await self.forget(item_id)
        if self._changed_here in self.store.on_change:
            self.store.on_change.remove(self._changed_here)

    @property
    def deliveries(self) -> int:
        """Wakes delivered (for tests and benchmarks)."""
        return sum(w.deliveries for watchers in self._watched.values() for w in watchers)

    # Reading ---------------------------------------------------------------------

    async def state(self, item_id: str) -> ItemState:
        """The item's standing and revision as read now: the revision first,
        then the lease. A write commits the lease it takes in the program
        that writes the bytes, ahead of them, so a revision seen is never
        paired with the lease from before the write that made it (read the
        other way round, a write landing between the two reads showed the
        new bytes as free)."""
        leases = self.store.leases
        revision = None
        try:
            meta, _ = await self.store.meta(item_id)
        except ArtifactError as error:
            if error.kind != "missing-target":
                raise  # unreadable now is not gone: the wake is dropped, not told
            meta = None
        if meta is not None:
            op = Read(ItemPaths(item_id).file(meta.primary))
            result = (await self.store.target.run(ControlProgram([op])))[0]
            if result.status is not Status.ABSENT:  # a delete under way: gone
                raise_for_result(op, result)
                revision = revision_of(result.value)
        view = await leases.observe(item_id)
        standing = view.standing(leases.client.client_id)
        held = standing == "held"
        return ItemState(standing, leases.holder_text(view) if held else None, leases.holder(view) if held else None, revision)

    # Wakes -------------------------------------------------------------------------

    def _changed_here(self, item_id: str, reason: str) -> None:
        if reason == "deleted":
            task = asyncio.get_running_loop().create_task(self.forget(item_id))
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
        elif item_id in self._watched:
            self._own.add(item_id)

    async def _woken(self, item_id: str, _wake: Wake) -> None:
        if item_id not in self._watched:
            return
        try:
            await self._answer_request(item_id)
            now = await self.state(item_id)
        except (ArtifactError, TargetError) as error:
            _log.info("artifact %s: could not read its state after a change: %s", item_id, error)
            return
        before = self._seen.get(item_id)
        self._seen[item_id] = now
        own = item_id in self._own
        self._own.discard(item_id)
        if now.standing == "mine":
            # Only this process writes an item while it holds it (every other
            # write is fenced), and its own didChange told the editors: a wake
            # read in the middle of its own write is no news either.
            return
        # Who holds it (None: writable here) and its text are what an editor
        # shows; a renewal, or free turning expired, changes neither.
        if before is not None and (before.holder, before.revision) == (now.holder, now.revision):
            return
        if own and (before is None or before.holder == now.holder):
            return  # this process's own change: its own didChange told the editors
        try:
            self._changed(item_id, now)
        except Exception:
            _log.exception("artifact %s: the change listener failed", item_id)
        if now.revision is None:
            # Deleted elsewhere: nothing more to watch (stopped from a task of
            # its own: this runs in the watcher being stopped).
            task = asyncio.get_running_loop().create_task(self.forget(item_id))
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _answer_request(self, item_id: str) -> None:
        """Another process asks for an item held here: hand it over now when
        it has been idle long enough, else once it has."""
        leases = self.store.leases
        if not leases.holds(item_id):
            return
        wait = await leases.handover_wait(item_id)
        if wait is None:
            return
        if wait <= 0:
            await leases.renew(item_id)
            return
        if item_id not in self._answering:
            loop = asyncio.get_running_loop()

            def again() -> None:
                self._answering.pop(item_id, None)
                task = loop.create_task(self._answer_request(item_id))
                task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

            self._answering[item_id] = loop.call_later(wait, again)
