"""Disk use of a 1,000-turn session against its logical size, with publication
collection and packing (as the LSP server and the CLI run them), with
collection but no packing (before old generations were packed), and without
collection (before it was scheduled), in the same run.

Each turn is what an agent turn publishes: the prompt and some reasoning in
a mid-turn checkpoint (the 30 s timer's), then a tool call and its result, a
response of ``RESPONSE_BYTES`` and the settlement -- two publications a
turn. Real turns are
seconds apart and the target clock has whole seconds (collection keeps every
generation that ties the newest ones), so each publication's manifest is
stamped ``SPACING`` seconds after the previous one.

Reported per session:

- ``logical_bytes``: the bytes of the committed head's logical files (what a
  reader of the session gets: sidecar, transcript parts, index pages);
- ``disk_bytes``: allocated blocks of every file and directory under the
  session directory, each inode counted once (``st_blocks`` * 512), and
  ``apparent_bytes``: their sizes;
- ``ratio``: disk / logical;
- generation directories, all publication directories, files;
- pack volumes and their bytes;
- the wall time of the 1,000 turns, collection running in the background of
  the collecting ones (``collect_steps``: its bounded steps).

The baseline is the same session built without collection; the row without
packing runs the same collection with ``pack_batch=None``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from harness import report
from mevedel_server.store import ClientIdentity, read_committed
from mevedel_server.store.service import EvidenceInput, SessionService, background
from mevedel_server.store.workspace_wide import collection
from mevedel_server.targets import LocalTarget

TURNS = int(os.environ.get("MEVEDEL_BENCH_TURNS", "1000"))
RESPONSE_BYTES = 600
SPACING = 20
ME = ClientIdentity("bench-storage", "bench-host")


class _Clock:
    """Stamps each new publication ``SPACING`` seconds after the previous one."""

    def __init__(self, sessions: Path) -> None:
        self.sessions = sessions
        self.next = int(time.time()) - 4 * TURNS * SPACING
        self.stamped: set[str] = set()

    def tick(self) -> None:
        for publications in self.sessions.glob("*/.publications"):
            for directory in publications.iterdir():
                if directory.name in self.stamped or not (directory / "manifest.json").exists():
                    continue
                self.stamped.add(directory.name)
                self.next += SPACING
                os.utime(directory / "manifest.json", (self.next, self.next))
                os.utime(directory, (self.next, self.next))


async def _build(root: Path, collect: bool) -> tuple[str, SessionService, float, int]:
    service = SessionService(LocalTarget(root), ME, publication_keep_recent=3 if collect else None)
    session_id = (await service.sessions.create()).session_id
    clock = _Clock(root / ".mevedel" / "sessions")
    began = time.perf_counter()
    for n in range(1, TURNS + 1):
        await service.turns.begin_turn(session_id, f"prompt {n}: please look at the failing test and fix it")
        await service.turns.append(session_id, EvidenceInput("reasoning", text="thinking about it " * 8))
        await service.turns.checkpoint(session_id)
        clock.tick()
        await service.turns.append(session_id, EvidenceInput("tool_call", call_id=f"c{n}", name="read", arguments='{"path": "src/x.py"}'))
        await service.turns.append(session_id, EvidenceInput("tool_result", call_id=f"c{n}", output="def x():\n    return 1\n" * 4, is_error=False))
        await service.turns.append(session_id, EvidenceInput("response", text=("r" * (RESPONSE_BYTES - 1)) + "\n"))
        await service.turns.settle(session_id)
        clock.tick()
        await asyncio.sleep(0)
    session = service.session(session_id)
    if session.collector is not None:
        while session.collector.running:
            await asyncio.sleep(0.01)
    took = time.perf_counter() - began
    steps = session.collector.steps if session.collector is not None else 0
    return session_id, service, took, steps


def _disk(directory: Path) -> tuple[int, int, int]:
    seen: set[int] = set()
    blocks = apparent = files = 0
    for path in [directory, *directory.rglob("*")]:
        st = path.lstat()
        if st.st_ino in seen:
            continue
        seen.add(st.st_ino)
        blocks += st.st_blocks * 512
        apparent += st.st_size
        files += path.is_file()
    return blocks, apparent, files


async def _measure(label: str, collect: bool, pack: bool = True) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        root = Path(tmp)
        # The server's collector calls collect() with the default batch;
        # the row without packing runs the same collector with it off.
        background.collect = collection.collect if pack else _unpacked
        try:
            session_id, service, took, steps = await _build(root, collect)
        finally:
            background.collect = collection.collect
        snapshot = await read_committed(LocalTarget(root), session_id)
        logical = sum(len(data) for data in (await snapshot.read_all()).values())
        session_dir = root / ".mevedel" / "sessions" / session_id
        disk, apparent, files = _disk(session_dir)
        publications = session_dir / ".publications"
        directories = [d for d in publications.iterdir() if d.is_dir()]
        generations = sum(1 for d in directories if (d / "manifest.json").exists())
        volumes = [v for v in publications.iterdir() if v.name.startswith(".pack-")]
        await service.sessions.close(session_id)
        return {
            "session": label,
            "turns": TURNS,
            "logical_bytes": logical,
            "disk_bytes": disk,
            "apparent_bytes": apparent,
            "ratio": round(disk / logical, 2),
            "generations": generations,
            "publication_dirs": len(directories),
            "files": files,
            "pack_volumes": len(volumes),
            "pack_bytes": sum(v.stat().st_size for v in volumes),
            "build_s": round(took, 1),
            "collect_steps": steps,
        }


async def main() -> None:
    rows = [
        await _measure("without collection", False),
        await _measure("with collection, no packing (before)", True, pack=False),
        await _measure("with collection and packing", True),
    ]
    none, before, after = rows
    notes = {
        "disk_vs_no_collection": round(after["disk_bytes"] / none["disk_bytes"], 3),
        "disk_vs_before": round(after["disk_bytes"] / before["disk_bytes"], 3),
        "publications_per_turn": 2,
        "load": os.getloadavg()[0],
    }
    report("storage", rows, notes)


async def _unpacked(*args, **kwargs):
    return await collection.collect(*args, **kwargs, pack_batch=None)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
