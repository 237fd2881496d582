"""A process with an item open, read-only because another process holds
it, is told when that holder stops holding although nothing is written:
its process killed (SIGKILL; waited for with a pidfd, or looked for in
``/proc`` where there is none), or its lease reaching its expiry after it
stopped renewing. The holder is a real process running the store
(``DRIVER`` of the two-process tests); the watching process writes the item
once told."""

from __future__ import annotations

import asyncio
import os

import pytest
from test_artifacts_dead_holder import holding, kill
from test_artifacts_item_watch import GUARD, Changes
from test_artifacts_two_processes import (
    ITEM,
    created,
    finish,
    next_event,
    primary,
    start,
)

from deadlines import ticks
from mevedel_server.artifacts.item_watch import ItemWatches
from mevedel_server.artifacts.store import ArtifactStore
from mevedel_server.store.authority.lease import ClientIdentity
from mevedel_server.store.watching.watch import WatchCadence
from mevedel_server.targets import LocalTarget


def _watching(root):
    store = ArtifactStore(LocalTarget(str(root)), ClientIdentity("client-watcher", "vm"))
    changes = Changes()
    # Polling, as on an SSH workspace; nothing is written either way.
    cadence = WatchCadence(idle_seconds=0.2, active_seconds=0.2, notifications=False)
    return store, changes, ItemWatches(store, changes, cadence=lambda: cadence)


def _counted_reads(store) -> list[int]:
    """How many reads of the item's lease have finished (the watch's too)."""
    done = [0]
    observe = store.leases.observe

    async def counted(item_id):
        try:
            return await observe(item_id)
        finally:
            done[0] += 1

    store.leases.observe = counted
    return done


async def _shown_held(store, watches, changes) -> None:
    """Open the item as an editor does (read, then watch what it showed),
    and wait until it is shown held (a renewal that was late when it was
    read is told too), and until the watch has read it after arming (each
    of its two watchers reads it once when armed): a read after the holder
    stopped holding would tell it without any re-check."""
    reads = _counted_reads(store)
    seen = await watches.state(ITEM)
    await watches.watch(ITEM, seen=seen)
    if seen.writable:
        seen = await changes.next(lambda s: not s.writable)
    for _ in ticks(GUARD):
        if reads[0] >= 3:
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail("the watch never read the item once armed")
    assert seen.holder == "holder-host" and not (await store.read(ITEM)).writable


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "proc"])
async def test_an_open_item_whose_holder_is_killed_is_told_writable(tmp_path, monkeypatch, pidfd):
    root = tmp_path / "ws"
    root.mkdir()
    await asyncio.to_thread(created, root)  # runs a loop of its own
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open")  # a kernel or Python without it
    holder = await asyncio.to_thread(holding, root)  # an hour's lease, renewed
    store, changes, watches = _watching(root)
    try:
        await _shown_held(store, watches, changes)
        changes.seen.clear()  # only what follows the kill counts
        await asyncio.to_thread(kill, holder)
        try:
            state = await changes.next(lambda s: s.writable)
        except TimeoutError:
            pytest.fail(f"the item was still shown held {GUARD} s after its holder was killed")
        assert state.holder is None
        await store.write(ITEM, b"written once told\n")
        assert primary(root) == b"written once told\n"
    finally:
        if holder.poll() is None:
            kill(holder)
        await watches.close()
        await store.close()


async def test_an_open_item_whose_holder_stopped_renewing_is_told_writable_at_its_expiry(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    await asyncio.to_thread(created, root)  # runs a loop of its own
    # Alive throughout (so only the expiry can free it), renewing until
    # told to stop as a suspended laptop would.
    holder = start(root, "holder", [["write", "held there"], ["stay"], ["wait"]], lease_seconds=12)
    store, changes, watches = _watching(root)
    try:
        assert (await asyncio.to_thread(next_event, holder, "write"))["ok"]
        await _shown_held(store, watches, changes)
        changes.seen.clear()  # only what follows the stop counts
        holder.stdin.write("go\n")
        holder.stdin.flush()
        await asyncio.to_thread(next_event, holder, "waiting")
        try:
            state = await changes.next(lambda s: s.writable)
        except TimeoutError:
            pytest.fail(f"the item was still shown held {GUARD} s after its holder stopped renewing a 12 s lease")
        assert state.holder is None and holder.poll() is None
        await store.write(ITEM, b"taken after the expiry\n")
        assert primary(root) == b"taken after the expiry\n"
        holder.stdin.write("go\n")
        holder.stdin.flush()
        await asyncio.to_thread(finish, holder)
    finally:
        if holder.poll() is None:
            kill(holder)
        await watches.close()
        await store.close()
