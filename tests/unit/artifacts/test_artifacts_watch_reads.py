"""A watched item's primary file (a document, a whiteboard: possibly
megabytes) is read again only when its bytes may have changed: a wake for
a change of the lease alone (taken, renewed) reads none of it, and a write
another process made is read once although both of the item's watched
directories wake for it and two editors have it open. Every change of the
bytes is still told, a same-size rewrite in place too. Reading an item
another process holds (``artifact/read``) reads who holds it in the
program that reads its bytes. An editor opening an item gives its watch
the facts that read took, so the first wake after the opening reads none
of it either -- unless the file was modified in the tick of that read."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from test_artifacts_item_watch import GUARD, Changes

from deadlines import ticks
from mevedel_server.artifacts.item_watch import ItemWatches
from mevedel_server.artifacts.layout import ItemPaths
from mevedel_server.artifacts.store import ArtifactStore, revision_of
from mevedel_server.store.authority.lease import ClientIdentity
from mevedel_server.store.watching.watch import WatchCadence
from mevedel_server.targets import LocalTarget, Read, ReadNewest

#: An item of this size, so a read of it is not lost among small ones.
BIG = 256 * 1024
#: An item as large as a big whiteboard.
FIVE_MB = 5 * 1024 * 1024


class ReadCounting(LocalTarget):
    """A local target that counts the reads of one file and the lease
    observations of every program it runs."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.counted: str | None = None
        self.reads = 0
        self.bytes_read = 0
        self.observes = 0
        self.programs = 0

    async def run(self, program):
        self.programs += 1
        result = await super().run(program)
        for op, answer in zip(program.operations, result):
            if isinstance(op, Read) and op.path == self.counted and answer.ok:
                self.reads += 1
                self.bytes_read += len(answer.value)
            if isinstance(op, ReadNewest):
                self.observes += 1
        return result


def _store(target, name, label):
    store = ArtifactStore(target, ClientIdentity(f"client-{name}", "vm"), renew_every=3600)
    store.leases.label = label
    return store


async def _made_there(tmp_path, notifications, size, mtime):
    """An item of ``size`` bytes the other process made and let go, last
    modified at ``mtime``, and the watches of this process (nothing watched
    yet): the counting target, both stores, the changes told, the watches
    and the item's id."""
    root = tmp_path / "ws"
    root.mkdir()
    counting = ReadCounting(str(root))
    here = _store(counting, "here", "Emacs 30.1 (pid 11)")
    there = _store(LocalTarget(str(root)), "there", "Neovim 0.12.0 (pid 22)")
    changes = Changes()
    cadence = WatchCadence(idle_seconds=0.05, active_seconds=0.05, notifications=notifications)
    watches = ItemWatches(here, changes, cadence=lambda: cadence)
    item = await there.create("document", "Shared", b"x" * size)
    await there.leases.release(item.item_id)
    meta, _ = await here.meta(item.item_id)
    counting.counted = ItemPaths(item.item_id).file(meta.primary)
    os.utime(root / counting.counted, (mtime, mtime))
    return counting, here, there, changes, watches, item.item_id


async def _open(tmp_path, notifications):
    """An item the other process made a while ago and let go, open here."""
    # Written a minute ago, as an item opened for reading usually was.
    made = counting, here, there, changes, watches, item_id = await _made_there(tmp_path, notifications, BIG, 1_700_000_000)
    await watches.watch(item_id)
    return made


async def _opened_by_an_editor(tmp_path, notifications, size, *, mtime):
    """An item of ``size`` bytes the other process made and let go, last
    modified at ``mtime``, read by an editor here (``artifact/read``) and
    watched from that read."""
    counting, here, there, changes, watches, item_id = await _made_there(tmp_path, notifications, size, mtime)
    content = await here.read(item_id, facts=True)
    assert (counting.reads, counting.bytes_read) == (1, size)
    await watches.opened(content)
    return counting, here, there, changes, watches, content


@pytest.mark.parametrize("notifications", [True, False], ids=["inotify", "polling"])
async def test_the_first_wakes_after_an_editor_opens_an_item_read_none_of_it(tmp_path, notifications):
    # Written a minute ago, as an item opened for reading usually was.
    counting, here, there, changes, watches, content = await _opened_by_an_editor(
        tmp_path, notifications, FIVE_MB, mtime=1_700_000_000
    )
    item_id = content.meta.id
    # Another process takes the lease: told read-only, the bytes the
    # editor was given kept (the opening's read took the facts for them).
    await _taken_then_renewed_elsewhere_reading_nothing(counting, there, changes, watches, item_id, content.revision)
    await watches.close()
    await here.close()
    await there.close()


@pytest.mark.parametrize("notifications", [True, False], ids=["inotify", "polling"])
async def test_an_item_rewritten_in_the_tick_of_its_opening_is_read_at_the_first_wake(tmp_path, notifications):
    # Last modified in the timestamp tick of the opening's clock probe (a
    # coarse tick stamps a write just before the probe with the probe's
    # time; stamped here a while after it, which the rule sees alike):
    # the facts the opening took cannot stand for the bytes.
    ahead = int(time.time()) + 3600
    counting, here, there, changes, watches, content = await _opened_by_an_editor(tmp_path, notifications, BIG, mtime=ahead)
    item_id = content.meta.id
    assert content.facts is None
    # Rewritten in place, same size, within that tick: every fact a Stat
    # compares (size, inode, mtime to the nanosecond) is as it was.
    path = tmp_path / "ws" / counting.counted
    before = os.stat(path)
    with open(path, "r+b") as file:
        file.write(b"y")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_ino, after.st_mtime_ns) == (before.st_size, before.st_ino, before.st_mtime_ns)
    counting.reads = 0
    # A lease taken elsewhere wakes the watch (a poll cannot see the
    # rewrite itself): the bytes are read and the rewrite told.
    await there.hold(item_id)
    state = await changes.next(lambda s: not s.writable)
    assert state.revision == revision_of(b"y" + b"x" * (BIG - 1)) != content.revision
    assert counting.reads >= 1
    await watches.close()
    await here.close()
    await there.close()


async def _taken_then_renewed_elsewhere_reading_nothing(counting, there, changes, watches, item_id, revision):
    """The other process takes the item's lease (told: read-only, its
    holder named, ``revision`` kept), then renews it (a new generation,
    same holder: a wake that tells nobody anything); none of the item's
    bytes are read for either."""
    counting.reads = counting.bytes_read = 0
    await there.hold(item_id)
    state = await changes.next(lambda s: not s.writable)
    assert state.holder == "Neovim 0.12.0 (pid 22) on vm" and state.revision == revision
    await watches.settled(item_id)
    assert (counting.reads, counting.bytes_read) == (0, 0)
    observes = counting.observes
    await there.leases.renew(item_id)
    await _wake_handled(counting, watches, item_id, observes)
    assert (counting.reads, counting.bytes_read) == (0, 0)
    assert changes.seen == []


async def _wake_handled(counting, watches, item_id, observes_before):
    """Wait until a wake after ``observes_before`` has read the lease."""
    for _ in ticks(GUARD):
        if counting.observes > observes_before:
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail("no wake read the item's lease")
    await watches.settled(item_id)


@pytest.mark.parametrize("notifications", [True, False], ids=["inotify", "polling"])
async def test_a_lease_taken_or_renewed_elsewhere_reads_none_of_the_item(tmp_path, notifications):
    counting, here, there, changes, watches, item_id = await _open(tmp_path, notifications)
    assert counting.reads == 1
    await _taken_then_renewed_elsewhere_reading_nothing(counting, there, changes, watches, item_id, revision_of(b"x" * BIG))
    # Nor does a look with nothing changed at all (a re-check at the
    # holder's expiry, or a caller asking).
    assert (await watches.state(item_id)).revision == revision_of(b"x" * BIG)
    assert (counting.reads, counting.bytes_read) == (0, 0)
    # The bytes rewritten in place, same size, right after: told, read once.
    path = tmp_path / "ws" / counting.counted
    with open(path, "r+b") as file:
        file.write(b"y")
    await changes.next(lambda s: s.revision == revision_of(b"y" + b"x" * (BIG - 1)))
    assert counting.reads == 1
    await watches.close()
    await here.close()
    await there.close()


async def test_a_write_elsewhere_is_read_once_for_two_editors_and_both_directories(tmp_path):
    # Notifications: a wake comes once its directory has been quiet 20 ms,
    # so the read it makes is never within the written file's timestamp
    # tick (a poll can be, and then the next wake rightly reads again).
    counting, here, there, changes, watches, item_id = await _open(tmp_path, True)
    await watches.watch(item_id)  # a second editor opens it in this server
    counting.reads = counting.bytes_read = 0
    deliveries = watches.deliveries
    await there.write(item_id, b"z" * BIG)
    state = await changes.next(lambda s: s.revision == revision_of(b"z" * BIG))
    assert not state.writable
    # The write changed the lease directory and the primary file: both wake.
    for _ in ticks(GUARD):
        if watches.deliveries >= deliveries + 2:
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail("the two directories of the item did not both wake")
    await watches.settled(item_id)
    assert (counting.reads, counting.bytes_read) == (1, BIG)
    # Told at most once more, when a wake came between the lease taken and
    # the bytes written (held, the old bytes): read none of them then.
    assert [s.revision for _, s in changes.seen] in ([], [revision_of(b"x" * BIG)])
    await watches.close()
    await here.close()
    await there.close()


async def test_reading_an_item_held_elsewhere_names_its_holder_in_the_bytes_program(tmp_path):
    counting, here, there, changes, watches, item_id = await _open(tmp_path, True)
    await there.hold(item_id)
    await changes.next(lambda s: not s.writable)
    await watches.settled(item_id)  # the watch reads nothing more
    # Its wakes look at the item through the same target: only the read's
    # own programs are counted (one wake during a slow read made four).
    await watches.close()
    counting.programs = counting.reads = 0
    content = await here.read(item_id)
    assert content.holder == "Neovim 0.12.0 (pid 22) on vm" and not content.writable
    assert content.data == b"x" * BIG and counting.reads == 1
    # The metadata (which file is the primary), then the bytes, the
    # discussion and the lease: one round trip each on an SSH workspace.
    assert counting.programs == 2
    await there.leases.release(item_id)
    content = await here.read(item_id)
    assert content.holder is None and content.writable
    await here.close()
    await there.close()
