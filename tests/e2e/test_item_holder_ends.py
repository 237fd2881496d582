"""An editor showing a document read-only, because another process holds
it, is told when that holder stops holding although nothing is written:
the real language server over stdio has the item open (read), the holder
is a real process running the store; it is killed (SIGKILL), or it stops
renewing its short lease and stays alive. The server sends
`mevedel/artifact/didChange` `elsewhere`, writable, and a write through it
then succeeds."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from mevedel_protocol import methods

from .conftest import request

#: Long enough never to be the reason a test passes or fails on a loaded
#: machine; every wait ends on its event.
GUARD = 60

#: Creates a document (no lease taken), says its id, then on each line of
#: stdin: ``take`` writes it (taking its lease of argv[2] seconds, renewed
#: every third of it); ``stop`` stops renewing (a suspended laptop, alive);
#: end of input ends it.
_HOLD = """
import asyncio, os, sys
from mevedel_server.artifacts.store import ArtifactStore
from mevedel_server.store import ClientIdentity
from mevedel_server.targets import LocalTarget

async def main():
    store = ArtifactStore(LocalTarget(sys.argv[1]), ClientIdentity("holder-client", "holder-host"), lease_seconds=int(sys.argv[2]))
    store.leases.label = f"holder process (pid {os.getpid()})"
    item = await store.create("document", "Held", b"v0\\n")
    print(item.item_id, flush=True)
    loop = asyncio.get_running_loop()
    while (line := await loop.run_in_executor(None, sys.stdin.readline)):
        if line.strip() == "take":
            await store.write(item.item_id, b"held there\\n")
            print("held", flush=True)
        elif line.strip() == "stop":
            store.leases._renewal.cancel()
            print("stopped", flush=True)

asyncio.run(main())
"""


def _start(workspace, lease_seconds: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(workspace), str(lease_seconds)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    item_id = process.stdout.readline().strip()
    assert item_id, "the holding process did not create its document"
    return process, item_id


def _say(process: subprocess.Popen, line: str, answer: str) -> None:
    process.stdin.write(line + "\n")
    process.stdin.flush()
    assert process.stdout.readline() == answer + "\n", f"the holding process did not answer {line!r}"


class Told:
    """The server's `elsewhere` notifications, waited for by what they say."""

    def __init__(self, client) -> None:
        self.notes: list[dict] = []
        self._arrived = asyncio.Event()
        client.feature(methods.ARTIFACT_DID_CHANGE)(lambda params: self._note(params))

    def _note(self, params) -> None:
        self.notes.append(params)
        self._arrived.set()

    async def next(self, item_id: str, writable: bool, failure: str) -> dict:
        try:
            while True:
                found = [n for n in self.notes if n["id"] == item_id and n["reason"] == "elsewhere" and n["writable"] is writable]
                if found:
                    self.notes.remove(found[0])
                    return found[0]
                self._arrived.clear()
                await asyncio.wait_for(self._arrived.wait(), GUARD)
        except TimeoutError:
            pytest.fail(f"{failure} (nothing told in {GUARD} s)")


async def _shown_held(client, item_id: str) -> None:
    shown = await request(client, methods.ARTIFACT_READ, {"id": item_id})
    assert not shown["writable"] and shown["holder"].startswith("holder process (pid "), shown
    assert shown["content"] == "held there\n"


async def test_an_open_item_whose_holder_is_killed_turns_writable(client, workspace):
    told = Told(client)
    holder, item_id = await asyncio.to_thread(_start, workspace, 3600)
    try:
        # Opened while free: the armed watch's own first reads tell nothing
        # however late they land (free and a dead holder both show writable).
        assert (await request(client, methods.ARTIFACT_READ, {"id": item_id}))["writable"]
        await asyncio.to_thread(_say, holder, "take", "held")
        await told.next(item_id, False, "the editor was never told the item was taken")
        await _shown_held(client, item_id)
        told.notes.clear()  # only what follows the kill counts
        holder.kill()  # SIGKILL: its hour-long lease is never released
        await asyncio.to_thread(holder.wait)
        note = await told.next(item_id, True, "the editor still shows the item held by a killed process")
        assert note.get("holder") is None
        await request(client, methods.ARTIFACT_WRITE, {"id": item_id, "content": "mine now\n"})
        assert (await request(client, methods.ARTIFACT_READ, {"id": item_id}))["content"] == "mine now\n"
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()


async def test_an_open_item_whose_holders_lease_expires_turns_writable(client, workspace):
    told = Told(client)
    # Renewed every 4 s until stopped: a late renewal never lets it lapse first.
    holder, item_id = await asyncio.to_thread(_start, workspace, 12)
    try:
        await asyncio.to_thread(_say, holder, "take", "held")
        # Opened while held: a renewal late at the read is told when it comes.
        if (await request(client, methods.ARTIFACT_READ, {"id": item_id}))["writable"]:
            await told.next(item_id, False, "the live holder was never shown")
        await _shown_held(client, item_id)
        told.notes.clear()  # only what follows the stop counts
        await asyncio.to_thread(_say, holder, "stop", "stopped")
        await told.next(item_id, True, "the editor still shows the item held by a lease past its expiry")
        assert holder.poll() is None  # alive: only the expiry freed it
        await request(client, methods.ARTIFACT_WRITE, {"id": item_id, "content": "taken at its expiry\n"})
        assert (await request(client, methods.ARTIFACT_READ, {"id": item_id}))["content"] == "taken at its expiry\n"
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()
