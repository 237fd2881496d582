"""A real process that holds a session's lease mid-turn, for the tests of
what other clients may do once it dies (``kill``)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

#: The identity the holding process uses.
HOLDER_CLIENT, HOLDER_HOST = "holder-client", "holder-host"

#: Creates a session, begins a turn and checkpoints it under a ten-minute
#: lease it renews, says which session, and waits.
_HOLD = f"""
import asyncio, sys
from pathlib import Path
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

async def main():
    identity = ClientIdentity({HOLDER_CLIENT!r}, {HOLDER_HOST!r})
    service = SessionService(LocalTarget(Path(sys.argv[1])), identity, lease_seconds=600)
    sid = (await service.sessions.create("Held")).session_id
    await service.turns.begin_turn(sid, "never finished")
    await service.turns.checkpoint(sid)
    print(sid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@contextlib.contextmanager
def holding_process(root: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """The holding process of a new session in ROOT, and that session."""
    process = subprocess.Popen([sys.executable, "-c", _HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        sid = process.stdout.readline().strip()
        assert sid, "the holding process did not start its session"
        yield process, sid
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def kill(process: subprocess.Popen) -> None:
    """SIGKILL, as a crash: nothing of the process runs after it."""
    process.send_signal(signal.SIGKILL)
    process.wait()
