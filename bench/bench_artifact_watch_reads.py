"""What a watched item's lease changes cost in bytes read (target: a change
of the lease alone reads none of the item, however large it is).

Two ``ArtifactStore``s (two client identities, as two server processes
have) on one local workspace. The other process made a 5 MB document a
while ago and let go of it. First, each round, an editor opens it here as
the language server's ``artifact/read`` does (``ArtifactStore.read``, then
``ItemWatches.opened``) and the other process takes the lease (this one
is told: read-only): the bytes read from the opening to that first wake
handled are counted (the opening's own read is the editor's, 5 MB), then
the watch is dropped and the lease handed back. Then this process
watches it (``ItemWatches``, as the language server watches every item
an editor has open); each round the other process takes the lease
(told: read-only), renews it (nothing told), and hands it back (told:
writable); the bytes this process's target reads of the primary file are
counted for each. Then a write elsewhere of 5 MB: read once, however many
wakes it makes. Counts, not times: the result does not depend on the
machine's load.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from harness import report

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))

from mevedel_server.artifacts.item_watch import ItemWatches  # noqa: E402
from mevedel_server.artifacts.layout import ItemPaths  # noqa: E402
from mevedel_server.artifacts.store import ArtifactStore  # noqa: E402
from mevedel_server.store.authority.lease import ClientIdentity  # noqa: E402
from mevedel_server.targets import LocalTarget, Read, ReadNewest  # noqa: E402

ROUNDS = int(os.environ.get("MEVEDEL_BENCH_ROUNDS", "5"))
SIZE = 5 * 1024 * 1024


class Counting(LocalTarget):
    """Counts the bytes read of one file and the lease observations."""

    counted: str | None = None
    bytes_read = 0
    observes = 0

    async def run(self, program):
        result = await super().run(program)
        for op, answer in zip(program.operations, result):
            if isinstance(op, Read) and op.path == self.counted and answer.ok:
                self.bytes_read += len(answer.value)
            if isinstance(op, ReadNewest):
                self.observes += 1
        return result


async def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        counting = Counting(scratch)
        told: asyncio.Queue = asyncio.Queue()
        here = ArtifactStore(counting, ClientIdentity("bench-here", "bench-host"), renew_every=3600)
        there = ArtifactStore(LocalTarget(scratch), ClientIdentity("bench-there", "bench-host"), renew_every=3600)
        watches = ItemWatches(here, lambda _item_id, state: told.put_nowait(state))
        item = await there.create("document", "Big", b"x" * SIZE)
        item_id = item.item_id
        await there.leases.release(item_id)
        meta, _ = await here.meta(item_id)
        counting.counted = ItemPaths(item_id).file(meta.primary)
        os.utime(os.path.join(scratch, counting.counted), (1_700_000_000, 1_700_000_000))  # made a while ago

        async def counted(change, wait_told: bool) -> int:
            before, observes = counting.bytes_read, counting.observes
            await change()
            if wait_told:
                await asyncio.wait_for(told.get(), 30)
            while counting.observes == observes:
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.1)  # any later wake of the same change
            await watches.settled(item_id)
            return counting.bytes_read - before

        opened = []
        for _ in range(ROUNDS):
            before = counting.bytes_read
            await watches.opened(await here.read(item_id, facts=True))
            opened.append(counting.bytes_read - before + await counted(lambda: there.hold(item_id), True))
            await watches.forget(item_id)
            await there.leases.release(item_id)
            while not told.empty():  # nothing more is told of an item no longer watched
                told.get_nowait()

        await watches.watch(item_id)
        taken, renewed, released = [], [], []
        for _ in range(ROUNDS):
            taken.append(await counted(lambda: there.hold(item_id), True))
            renewed.append(await counted(lambda: there.leases.renew(item_id), False))
            released.append(await counted(lambda: there.leases.release(item_id), True))
        written = await counted(lambda: there.write(item_id, b"y" * SIZE), True)
        await watches.close()
        await here.close()
        await there.close()
    rows = [
        {"case": "opened by an editor (5 MB read), lease taken elsewhere: to the first wake", "bytes_read_per_change": max(opened)},
        {"case": "lease taken elsewhere (told read-only)", "bytes_read_per_change": max(taken)},
        {"case": "lease renewed elsewhere (nothing told)", "bytes_read_per_change": max(renewed)},
        {"case": "lease handed back (told writable)", "bytes_read_per_change": max(released)},
        {"case": "5 MB written elsewhere (told the new bytes)", "bytes_read_per_change": written},
    ]
    report(
        "artifact_watch_reads",
        rows,
        {
            "target": "0 bytes read for a change of the lease alone (an opening's own read the only one); a write read once",
            "met": max(taken + renewed + released) == 0 and max(opened) == SIZE and written == SIZE,
            "rounds": ROUNDS,
            "item_bytes": SIZE,
            "setup": "two stores on one local workspace, inotify watch, the item last written a while ago",
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
