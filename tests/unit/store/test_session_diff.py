"""``SessionService.turns.diff`` and ``restore_file`` on both targets: a session
read from another client's committed snapshot gives the same diff locally
and over SSH, in a number of programs that does not grow with the files
changed, and a restore goes through the target."""

from __future__ import annotations

import os

from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import ControlProgram, ProgramTarget


class Counting(ProgramTarget):
    def __init__(self, inner) -> None:
        self.inner, self.programs = inner, 0

    async def run(self, program: ControlProgram):
        self.programs += 1
        return await self.inner.run(program)


async def a_turn_of(service: SessionService, root, files: int) -> str:
    sid = (await service.sessions.create()).session_id
    await service.turns.begin_turn(sid, "change many files")
    for n in range(files):
        await service.turns.capture_file(sid, f"f{n}.txt")
        (root / f"f{n}.txt").write_text(f"file {n}\nchanged\n")
    await service.turns.capture_file(sid, "run.sh")
    os.chmod(root / "run.sh", 0o755)
    await service.turns.settle(sid)
    await service.sessions.close(sid)
    return sid


async def test_a_diff_and_a_restore_on_both_targets(tmp_path, open_target):
    for n in range(20):
        (tmp_path / f"f{n}.txt").write_text(f"file {n}\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "run.sh", 0o644)
    writer = SessionService(await open_target(tmp_path), ClientIdentity("writer", "desk"))
    sid = await a_turn_of(writer, tmp_path, 20)

    counted = Counting(await open_target(tmp_path))
    reader = SessionService(counted, ClientIdentity("reader", "laptop"))
    diff = await reader.turns.diff(sid)
    assert len(diff.files) == 21 and diff.insertions == 20 and diff.deletions == 0
    assert {f.change for f in diff.files} == {"modified", "mode changed"}
    assert counted.programs <= 4  # the committed snapshot, however many files changed

    await reader.sessions.open(sid, "resume")
    shown = await reader.turns.restore_file(sid, "f3.txt", 1)
    assert shown.turn is None and (tmp_path / "f3.txt").read_text() == "file 3\nchanged\n"
    done = await reader.turns.restore_file(sid, "f3.txt", 1, commit=True)
    assert done.turn == 2 and (tmp_path / "f3.txt").read_text() == "file 3\n"
    latest = await reader.turns.diff(sid)
    assert [(f.path, f.change) for f in latest.files] == [("f3.txt", "modified")]
    every = await reader.turns.diff(sid, 1, 2)
    assert len(every.files) == 20 and "f3.txt" not in {f.path for f in every.files}  # changed, then put back
    await reader.sessions.close(sid)


async def test_a_range_composes_across_a_rewind(tmp_path):
    from mevedel_server.targets import LocalTarget

    (tmp_path / "a.txt").write_text("a0\n")
    service = SessionService(LocalTarget(tmp_path), ClientIdentity("one", "desk"))
    sid = (await service.sessions.create()).session_id
    for n, (path, text) in enumerate((("a.txt", "a1\n"), ("b.txt", "b1\n"), ("a.txt", "a3\n")), start=1):
        await service.turns.begin_turn(sid, f"turn {n}")
        await service.turns.capture_file(sid, path)
        (tmp_path / path).write_text(text)
        await service.turns.settle(sid)
    every = await service.turns.diff(sid, 1, 3)
    assert [(f.path, f.change) for f in every.files] == [("a.txt", "modified"), ("b.txt", "added")]
    assert "-a0\n+a3\n" in every.files[0].text
    impact = await service.history.prepare_rewind(sid, "before", 2)
    await service.history.commit_rewind(sid, impact.token.text)
    assert (tmp_path / "a.txt").read_text() == "a1\n" and not (tmp_path / "b.txt").exists()
    after = await service.turns.diff(sid, 1)
    assert [(f.path, f.change) for f in after.files] == [("a.txt", "modified")] and "+a1\n" in after.files[0].text
    await service.turns.begin_turn(sid, "a new turn 2")
    await service.turns.capture_file(sid, "c.txt")
    (tmp_path / "c.txt").write_text("c\n")
    await service.turns.settle(sid)
    assert [(f.path, f.change) for f in (await service.turns.diff(sid, 1, 2)).files] == [("a.txt", "modified"), ("c.txt", "added")]
    await service.sessions.close(sid)
