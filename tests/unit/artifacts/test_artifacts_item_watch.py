"""Every process that has an item open learns what another process does to
it: a takeover and a write (the holder named by editor and host), a
hand-back, a deletion; with filesystem notifications on a local workspace
and by polling otherwise. The holder answers a hand-over request at once
when the item is already idle."""

import asyncio

import pytest

from deadlines import ticks
from mevedel_server.artifacts.item_watch import ItemWatches
from mevedel_server.artifacts.store import ArtifactStore, revision_of
from mevedel_server.store.authority.lease import ClientIdentity
from mevedel_server.store.watching.watch import WatchCadence
from mevedel_server.targets import LocalTarget

#: Long enough never to be the reason a test passes or fails on a loaded
#: machine; every wait ends on its event.
GUARD = 30


def _store(target, name, label=None, **options):
    store = ArtifactStore(target, ClientIdentity(f"client-{name}", "vm"), renew_every=3600, **options)
    store.leases.label = label
    return store


class Changes:
    def __init__(self):
        self.seen = []
        self._event = asyncio.Event()

    def __call__(self, item_id, state):
        self.seen.append((item_id, state))
        self._event.set()

    async def next(self, predicate):
        while True:
            for found in self.seen:
                if predicate(found[1]):
                    self.seen.remove(found)
                    return found[1]
            self._event.clear()
            await asyncio.wait_for(self._event.wait(), GUARD)


def _handed_over(store) -> asyncio.Event:
    """Set when ``store`` has handed an item over (its leases say so)."""
    done = asyncio.Event()
    store.leases.on_change.append(lambda _item_id, reason: done.set() if reason == "handed-over" else None)
    return done


@pytest.mark.parametrize("notifications", [True, False], ids=["inotify", "polling"])
async def test_another_process_taking_and_writing_an_open_item_is_told_naming_it(root, notifications):
    target = LocalTarget(str(root))
    one = _store(target, "one", "Emacs 30.1 (pid 11)")
    two = _store(target, "two", "Neovim 0.12.0 (pid 22)")
    changes = Changes()
    cadence = WatchCadence(idle_seconds=0.05, active_seconds=0.05, notifications=notifications)
    watches = ItemWatches(one, changes, cadence=lambda: cadence)
    item = await one.create("document", "Shared", b"start\n")
    await one.write(item.item_id, b"one wrote\n")
    await one.leases.release(item.item_id)
    await watches.watch(item.item_id)
    await two.write(item.item_id, b"two wrote\n")
    state = await changes.next(lambda s: s.revision == revision_of(b"two wrote\n"))
    assert not state.writable
    assert state.holder == "Neovim 0.12.0 (pid 22) on vm" and state.holder_host == "vm"
    assert not (await one.read(item.item_id)).writable
    # The other process hands it back (it exits): writable here again.
    await two.close()
    state = await changes.next(lambda s: s.writable)
    assert state.holder is None and state.revision == revision_of(b"two wrote\n")
    # This process's own write is no news from the watch (the store says it).
    await one.write(item.item_id, b"one again\n")
    third = _store(target, "three", "mevedel CLI (pid 33)")
    await one.leases.release(item.item_id)
    await third.write(item.item_id, b"the CLI wrote\n")
    state = await changes.next(lambda s: s.revision == revision_of(b"the CLI wrote\n"))
    assert [s for _, s in changes.seen if s.revision == revision_of(b"one again\n") and s.writable] == []
    await third.delete(item.item_id)
    await changes.next(lambda s: s.revision is None)
    for _ in ticks():  # the watch of a deleted item stops (from a task of its own)
        if not watches.watching(item.item_id):
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail("the deleted item is still watched")
    await watches.close()
    await one.close()
    await third.close()


async def test_an_idle_holder_hands_over_as_soon_as_asked(root):
    target = LocalTarget(str(root))
    clock = [100.0]
    holder = _store(target, "holder", "Emacs 28.2 (pid 1)")
    holder.leases._monotonic = lambda: clock[0]
    asker = _store(target, "asker", "Neovim 0.7.2 (pid 2)")
    changes = Changes()
    cadence = WatchCadence(notifications=True)
    held_watch = ItemWatches(holder, lambda *_: None, cadence=lambda: cadence)
    asking_watch = ItemWatches(asker, changes, cadence=lambda: cadence)
    item = await holder.create("whiteboard", "Board")
    await holder.write(item.item_id, (await holder.read(item.item_id)).data)
    await held_watch.watch(item.item_id)
    await asking_watch.watch(item.item_id)
    clock[0] += 10  # idle 10 s already: no renewal (every 3600 s here) is waited for
    handed_over = _handed_over(holder)
    entry = await asker.request_handover(item.item_id)
    assert entry.holder == "Emacs 28.2 (pid 1) on vm"
    state = await changes.next(lambda s: s.writable)
    assert state.holder is None
    await asyncio.wait_for(handed_over.wait(), GUARD)  # the asker may be told before the holder's own write has returned
    assert not holder.leases.holds(item.item_id)
    await asker.write(item.item_id, b'{"elements": [], "type": "excalidraw"}')
    await held_watch.close()
    await asking_watch.close()
    await holder.close()
    await asker.close()


async def test_a_busy_holder_hands_over_once_idle_not_at_the_next_renewal(root):
    target = LocalTarget(str(root))
    holder = _store(target, "holder", "Emacs 28.2 (pid 1)", handover_idle_seconds=0.5)
    asker = _store(target, "asker", "Neovim 0.7.2 (pid 2)")
    changes = Changes()
    held_watch = ItemWatches(holder, lambda *_: None)
    asking_watch = ItemWatches(asker, changes)
    item = await holder.create("document", "Doc", b"x\n")
    await holder.write(item.item_id, b"just written\n")
    await held_watch.watch(item.item_id)
    await asking_watch.watch(item.item_id)
    handed_over = _handed_over(holder)
    await asker.request_handover(item.item_id)
    state = await changes.next(lambda s: s.writable)
    assert state.revision == revision_of(b"just written\n")
    await asyncio.wait_for(handed_over.wait(), GUARD)  # the asker may be told before the holder's own write has returned
    assert not holder.leases.holds(item.item_id)
    await held_watch.close()
    await asking_watch.close()
    await holder.close()
    await asker.close()
