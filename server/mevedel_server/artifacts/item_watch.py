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

A holder can also stop holding without anything changing on disk: its
lease reaches its expiry (it stopped renewing), or its process ends
without letting go (killed) and this machine can prove it. So while an
item is seen held elsewhere its watch re-reads it at the head's expiry
(one timer, by the target clock read with the head), and when the head
names a process this machine can judge, as soon as that process ends: a
pidfd per holder process in the event loop where the kernel has them,
else a look at ``/proc`` every :data:`PROCESS_CHECK_SECONDS`. Either is
only a hint too: the ordinary read decides, and tells the editors when
the item became writable.

A wake reads the primary file's bytes only when they may have changed:
each read keeps the file's facts (size, whole and nanosecond mtime, inode:
the target's ``Stat``) taken just before the bytes, and a wake whose
``Stat`` finds the same facts keeps the revision it had -- a renewal, a
hand-over request or a take of the lease costs no read of a file that may
be megabytes. The facts are kept only when the file was last modified
before a time of the target's own clock taken just before them (git's
"racily clean" rule, to the filesystem's timestamp tick): any later write
then stamps a different mtime, so a same-size rewrite within the same
second is still read, and a file modified in the very tick of its read is
read again at the next wake (:mod:`.file_facts`). An editor opening an
item gives its watch the facts its read took (:meth:`ItemWatches.opened`),
so the first wake after the opening reads no bytes either when they did
not change. Wakes coalesce:
one that comes while another waits to read the item is that one (both
directories wake for one write, and the read after them sees both).
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
    ProcessIdentity,
    Read,
    Stat,
    Status,
    TargetError,
    process_end_fd,
    process_has_ended,
    process_is_here,
    raise_for_result,
)
from .errors import ArtifactError
from .file_facts import FACTS_OPS, Facts, facts_of, facts_ops, trusted_facts
from .item_lease import LeaseView
from .layout import ItemPaths
from .store import ArtifactStore, ItemContent, revision_of

_log = logging.getLogger(__name__)

#: Items watched at once per store; the least recently opened goes first.
MAX_WATCHED = 256
#: Seconds between two looks at a holder process on this machine whose end
#: cannot be waited for (no pidfd): its death is told within about this.
PROCESS_CHECK_SECONDS = 2.0
#: Seconds until a held item whose standing could not be read is read again.
RETRY_SECONDS = 5.0


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
            facts = facts_of(result[1].value)
        # Compared as a pair, the second element never differs: any change is a lease wake.
        return (names, facts), None


class _ProcessEnds:
    """Waits for holder processes on this machine to end: one pidfd per
    process in the event loop, however many items it holds, so open items
    cost no descriptor of their own."""

    def __init__(self, ended: Callable[[str], None]) -> None:
        self._ended = ended
        self._fds: dict[ProcessIdentity, tuple[int, set[str]]] = {}
        self._of: dict[str, ProcessIdentity] = {}

    def wait(self, process: ProcessIdentity, item_id: str) -> bool:
        """Call ``ended(item_id)`` once ``process`` has ended; False when
        its end cannot be waited for (then the caller looks now and then)."""
        self.drop(item_id)
        entry = self._fds.get(process)
        if entry is None:
            fd = process_end_fd(process)
            if fd is None:
                return False
            try:
                asyncio.get_running_loop().add_reader(fd, self._readable, process)
            except (NotImplementedError, OSError, ValueError):  # a loop that cannot watch descriptors
                os.close(fd)
                return False
            entry = self._fds[process] = (fd, set())
        entry[1].add(item_id)
        self._of[item_id] = process
        return True

    def drop(self, item_id: str) -> None:
        process = self._of.pop(item_id, None)
        if process is None:
            return
        _fd, items = self._fds[process]
        items.discard(item_id)
        if not items:
            self._close(process)

    def close(self) -> None:
        for process in list(self._fds):
            self._close(process)
        self._of.clear()

    def _close(self, process: ProcessIdentity) -> set[str]:
        fd, items = self._fds.pop(process)
        try:
            asyncio.get_running_loop().remove_reader(fd)
        except RuntimeError:
            pass  # no loop any more: nothing reads it
        os.close(fd)
        return items

    def _readable(self, process: ProcessIdentity) -> None:
        if process not in self._fds:
            return
        items = self._close(process)
        for item_id in items:
            self._of.pop(item_id, None)
            self._ended(item_id)


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
        #: One re-check per item seen held elsewhere: at its head's expiry,
        #: or sooner to look at a holder process on this machine.
        self._rechecks: dict[str, asyncio.TimerHandle] = {}
        self._ends = _ProcessEnds(self._recheck_soon)
        #: One re-read at a time per item: a later read's state is never
        #: overwritten by an earlier read that finished after it.
        self._reading: dict[str, asyncio.Lock] = {}
        #: Items with a wake waiting for their re-read: a later wake is it.
        self._queued: set[str] = set()
        #: Each item's primary file (target path): an item keeps it for life.
        self._primaries: dict[str, str] = {}
        #: Each item's primary file facts and the revision of the bytes read
        #: right after them, kept while the facts can be trusted.
        self._known: dict[str, tuple[Facts, str]] = {}
        self._tasks: set[asyncio.Task] = set()
        store.on_change.append(self._changed_here)

    def watching(self, item_id: str) -> bool:
        return item_id in self._watched

    async def opened(self, item: ItemContent) -> None:
        """An editor was just given ``item`` (``ArtifactStore.read`` with
        ``facts``): watch it from what that read saw, its primary file's
        facts included (the first wake then reads no bytes when they did
        not change)."""
        item_id = item.meta.id
        standing = "held" if item.holder_host is not None else "mine" if self.store.leases.holds(item_id) else "free"
        seen = ItemState(standing, item.holder, item.holder_host, item.revision)
        await self.watch(item_id, seen=seen, primary=item.meta.primary, facts=item.facts)

    async def watch(
        self, item_id: str, *, seen: ItemState | None = None, primary: str | None = None, facts: Facts | None = None
    ) -> None:
        """Watch ``item_id`` (again: it becomes the most recent). ``seen``
        is what the editor was just given; without it the item is read.
        ``primary`` is the item's primary file name (else its metadata is
        read); ``facts`` are that file's trusted facts taken just before
        the bytes of ``seen.revision``."""
        paths = ItemPaths(item_id)
        primary_path = None if primary is None else paths.file(primary)
        # Any pair of facts and the bytes read after them will do, whatever
        # read (a wake's, another editor's opening) kept one before.
        known = None if facts is None or seen is None or seen.revision is None else (facts, seen.revision)
        if item_id in self._watched:
            self._watched.move_to_end(item_id)
            self._remember(item_id, primary_path, known)
            if seen is not None:
                self._seen[item_id] = seen
                if seen.standing == "held":
                    self._spawn(self._follow(item_id))
            return
        view = None
        if seen is None:
            seen, view = await self._read(item_id)
        self._seen[item_id] = seen
        cadence = self._cadence()
        watchers = [
            _DirectoryWatcher(self.store.target, paths.lease_dir, stat=None, cadence=cadence),
        ]
        meta_primary = primary_path
        if meta_primary is None:
            try:
                meta, _ = await self.store.meta(item_id)
                meta_primary = paths.file(meta.primary)
            except ArtifactError:
                pass
        watchers.append(_DirectoryWatcher(self.store.target, paths.authored, stat=meta_primary, cadence=cadence))
        if item_id in self._watched:  # watched meanwhile (the awaits above)
            return
        self._watched[item_id] = watchers
        self._remember(item_id, primary_path, known)
        for watcher in watchers:
            watcher.subscribe(lambda wake, item_id=item_id: self._woken(item_id, wake))
            watcher.start()
        if view is not None:
            self._schedule(item_id, view)
        elif seen.standing == "held":
            self._spawn(self._follow(item_id))
        while len(self._watched) > MAX_WATCHED:
            oldest = next(iter(self._watched))
            await self.forget(oldest)

    def _remember(self, item_id: str, primary: str | None, known: tuple[Facts, str] | None) -> None:
        if primary is None:
            return  # facts of an unnamed file pair with nothing a wake stats
        self._primaries[item_id] = primary
        if known is not None:
            self._known[item_id] = known

    async def forget(self, item_id: str) -> None:
        watchers = self._watched.pop(item_id, [])
        self._seen.pop(item_id, None)
        self._own.discard(item_id)
        timer = self._answering.pop(item_id, None)
        if timer is not None:
            timer.cancel()
        self._unschedule(item_id)
        self._reading.pop(item_id, None)
        self._queued.discard(item_id)
        self._primaries.pop(item_id, None)
        self._known.pop(item_id, None)
        for watcher in watchers:
            await watcher.stop()

    async def close(self) -> None:
        for item_id in list(self._watched):
            await self.forget(item_id)
        self._ends.close()
        for task in list(self._tasks):
            task.cancel()
        if self._changed_here in self.store.on_change:
            self.store.on_change.remove(self._changed_here)

    @property
    def deliveries(self) -> int:
        """Wakes delivered (for tests and benchmarks)."""
        return sum(w.deliveries for watchers in self._watched.values() for w in watchers)

    async def settled(self, item_id: str) -> None:
        """Return once the wakes of ``item_id`` delivered so far are handled
        (for tests and benchmarks): its re-reads run one at a time, in turn."""
        async with self._reading.setdefault(item_id, asyncio.Lock()):
            pass

    # Reading ---------------------------------------------------------------------

    async def state(self, item_id: str) -> ItemState:
        """The item's standing and revision as read now: the revision first,
        then the lease. A write commits the lease it takes in the program
        that writes the bytes, ahead of them, so a revision seen is never
        paired with the lease from before the write that made it (read the
        other way round, a write landing between the two reads showed the
        new bytes as free)."""
        state = (await self._read(item_id))[0]
        if item_id not in self._watched:  # what is kept is for the items watched
            self._primaries.pop(item_id, None)
            self._known.pop(item_id, None)
        return state

    async def _read(self, item_id: str) -> tuple[ItemState, LeaseView]:
        leases = self.store.leases
        revision = await self._revision(item_id)
        view = await leases.observe(item_id)
        standing = view.standing(leases.client.client_id)
        held = standing == "held"
        state = ItemState(standing, leases.holder_text(view) if held else None, leases.holder(view) if held else None, revision)
        return state, view

    async def _revision(self, item_id: str) -> str | None:
        """The primary file's revision now (None: the item is gone), its
        bytes read only when its facts are not the ones last read."""
        paths = ItemPaths(item_id)
        primary = self._primaries.get(item_id)
        if primary is None:
            try:
                meta, _ = await self.store.meta(item_id)
            except ArtifactError as error:
                if error.kind != "missing-target":
                    raise  # unreadable now is not gone: the wake is dropped, not told
                return None
            primary = self._primaries[item_id] = paths.file(meta.primary)
        known = self._known.get(item_id)
        if known is not None:
            meta_op, stat = Stat(paths.meta, optional=True), Stat(primary, optional=True)
            result = await self.store.target.run(ControlProgram([meta_op, stat]))
            if Status.ABSENT in (result[0].status, result[1].status):  # a delete under way: gone
                self._known.pop(item_id, None)
                return None
            raise_for_result(meta_op, result[0])
            raise_for_result(stat, result[1])
            if facts_of(result[1].value) == known[0]:
                return known[1]
        return await self._read_primary(item_id, primary)

    async def _read_primary(self, item_id: str, primary: str) -> str | None:
        """Read the primary file's bytes, keeping the facts taken just
        before them when a later write cannot leave them as they are."""
        self._known.pop(item_id, None)
        read, meta_op = Read(primary), Stat(ItemPaths(item_id).meta, optional=True)
        result = await self.store.target.run(ControlProgram([*facts_ops(primary), read, meta_op]))
        facts, result = trusted_facts(result[:FACTS_OPS]), result[FACTS_OPS:]
        if Status.ABSENT in (result[0].status, result[1].status):  # a delete under way: gone
            return None
        raise_for_result(read, result[0])
        raise_for_result(meta_op, result[1])
        revision = revision_of(result[0].value)
        if facts is not None:
            self._known[item_id] = (facts, revision)
        return revision

    # Wakes -------------------------------------------------------------------------

    def _changed_here(self, item_id: str, reason: str) -> None:
        if reason == "deleted":
            task = asyncio.get_running_loop().create_task(self.forget(item_id))
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
        elif item_id in self._watched:
            self._own.add(item_id)

    async def _woken(self, item_id: str, _wake: Wake | None) -> None:
        if item_id not in self._watched or item_id in self._queued:
            return  # the re-read already waiting starts after this wake: it sees what woke it
        self._queued.add(item_id)
        async with self._reading.setdefault(item_id, asyncio.Lock()):
            self._queued.discard(item_id)
            if item_id in self._watched:
                await self._reread(item_id)

    async def _reread(self, item_id: str) -> None:
        try:
            await self._answer_request(item_id)
            now, view = await self._read(item_id)
        except (ArtifactError, TargetError) as error:
            _log.info("artifact %s: could not read its state after a change: %s", item_id, error)
            seen = self._seen.get(item_id)
            if seen is not None and seen.standing == "held":
                self._arm(item_id, RETRY_SECONDS)  # else its holder's end would go untold
            return
        self._schedule(item_id, view)
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

    # Holders that stop holding with nothing written -----------------------------

    async def _follow(self, item_id: str) -> None:
        """An editor was just shown the item held elsewhere: schedule its
        re-check from the lease as it is now (only the lease is read when
        it is still that holder's; the item is re-read when it is not)."""
        async with self._reading.setdefault(item_id, asyncio.Lock()):
            if item_id not in self._watched:
                return
            leases = self.store.leases
            try:
                view = await leases.observe(item_id)
            except (ArtifactError, TargetError) as error:
                _log.info("artifact %s: could not read its lease: %s", item_id, error)
                self._arm(item_id, RETRY_SECONDS)
                return
            seen = self._seen.get(item_id)
            if seen is not None and seen.standing == "held" and leases.holder_text(view) == seen.holder:
                self._schedule(item_id, view)
                return
            await self._reread(item_id)

    def _schedule(self, item_id: str, view: LeaseView) -> None:
        """Re-check the item when the head ``view`` read stops holding it
        without a write: at its expiry, or when its process ends."""
        self._unschedule(item_id)
        record = view.record
        if record is None or view.standing(self.store.leases.client.client_id) != "held":
            return  # free, expired or this process's: only a write changes that
        # Whole seconds of the target clock: a live head has at least one left.
        expiry = asyncio.get_running_loop().time() + (record.expires_at - view.now)
        process = record.process
        if process is not None and process_is_here(process) and not self._ends.wait(process, item_id):
            self._arm(item_id, None, expiry=expiry, process=process)
        else:
            self._arm(item_id, None, expiry=expiry)

    def _arm(
        self, item_id: str, delay: float | None, *, expiry: float | None = None, process: ProcessIdentity | None = None
    ) -> None:
        """The item's one timer: ``delay`` seconds from now, else at
        ``expiry`` (loop time), looking at ``process`` (when given) every
        :data:`PROCESS_CHECK_SECONDS` until then."""
        old = self._rechecks.pop(item_id, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        if delay is not None:
            at = loop.time() + delay
        else:
            assert expiry is not None
            at = expiry if process is None else min(expiry, loop.time() + PROCESS_CHECK_SECONDS)

        def due() -> None:
            self._rechecks.pop(item_id, None)
            if process is not None and expiry is not None and loop.time() < expiry and not process_has_ended(process):
                self._arm(item_id, None, expiry=expiry, process=process)
                return
            self._recheck_soon(item_id)

        self._rechecks[item_id] = loop.call_at(at, due)

    def _unschedule(self, item_id: str) -> None:
        timer = self._rechecks.pop(item_id, None)
        if timer is not None:
            timer.cancel()
        self._ends.drop(item_id)

    def _recheck_soon(self, item_id: str) -> None:
        if item_id in self._watched:
            self._spawn(self._woken(item_id, None))

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)

        def done(task: asyncio.Task) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                _log.warning("artifact watch: a re-check failed", exc_info=task.exception())

        task.add_done_callback(done)

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
