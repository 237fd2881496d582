"""The file-state record's programs riding the turn's publications
(``agents/commit_rides.py``): the walk before a turn in the turn's first
publication, the post-turn reads in the settlement's walk, the record kept
for the next process by the settlement -- each one program fewer, with
the same checkpoint: what a command changed, with its bytes from before."""

from __future__ import annotations

import asyncio
import hashlib
import struct

import pytest
from msgspec.structs import replace
from test_agents_file_state import Programs

from mevedel_server.agents.commit_rides import keep_on_settlement, walk_riding
from mevedel_server.agents.file_state import FileStateRecord, Passengers
from mevedel_server.agents.workspace_files import WorkspaceFiles
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import (
    ControlProgram,
    FileScan,
    LocalTarget,
    OpResult,
    ProgramResult,
    ProgramTarget,
    ScanTree,
    SnapshotFile,
    WriteProject,
)
from mevedel_server.targets.executor import SCAN_FACTS
from mevedel_server.targets.program import Entry

ME = ClientIdentity("rides-client", "desk")


async def _turn_in_flight(tmp_path):
    """A held session with a second turn begun (the lease exists: the
    first turn's settlement claimed it), and files written seconds ago
    (not racy: their facts alone tell a later change)."""
    (tmp_path / "kept.txt").write_bytes(b"kept before\n")
    (tmp_path / "edited.txt").write_bytes(b"edited before\n")
    await asyncio.sleep(2.1)
    target = Programs(LocalTarget(tmp_path))
    service = SessionService(target, ME, renew_every=3600)
    sid = (await service.sessions.create()).session_id
    await service.turns.begin_turn(sid, "first")
    await service.turns.settle(sid)
    await service.turns.begin_turn(sid, "second")
    return target, service, sid


async def test_the_walk_before_a_turn_rides_its_first_publication_and_finds_what_a_command_did(tmp_path):
    target, service, sid = await _turn_in_flight(tmp_path)
    session = service.session(sid)
    alone = FileStateRecord(target, watch=False)
    before = target.programs
    await _publish(service, sid)
    await alone.refresh()
    separately = target.programs - before

    record = FileStateRecord(target, watch=False)
    before = target.programs
    await walk_riding(record, session, lambda: _publish(service, sid))
    assert target.programs - before == separately - 1

    # A shell command edits one file and makes another: the record finds
    # both, the edited one with its bytes from before the turn.
    (tmp_path / "edited.txt").write_bytes(b"edited by the command\n")
    (tmp_path / "made.txt").write_bytes(b"new\n")
    changes = {change.path: change for change in await record.changes()}
    assert set(changes) == {"edited.txt", "made.txt"}
    assert changes["edited.txt"].before.data == b"edited before\n"
    assert changes["made.txt"].before is None
    await service.sessions.close(sid)


async def _publish(service: SessionService, sid: str) -> None:
    """A publication with something new in it (a record appended)."""
    from mevedel_server.store import EvidenceInput

    service.turns.append_now(sid, EvidenceInput(kind="response", text="more"))
    result = await service.turns.checkpoint(sid)
    assert result.committed


async def test_a_publication_that_fails_leaves_the_walk_to_run_on_its_own(tmp_path):
    target, service, sid = await _turn_in_flight(tmp_path)
    record = FileStateRecord(target, watch=False)

    async def refused() -> None:
        raise RuntimeError("the publication failed")

    with pytest.raises(RuntimeError, match="the publication failed"):
        await walk_riding(record, service.session(sid), refused)
    (tmp_path / "edited.txt").write_bytes(b"after\n")
    changes = await record.changes()
    assert [(c.path, c.before.data) for c in changes] == [("edited.txt", b"edited before\n")]
    await service.sessions.close(sid)


async def test_the_post_turn_reads_ride_the_settlement_walk_and_the_settled_turn_has_the_new_content(tmp_path):
    target, service, sid = await _turn_in_flight(tmp_path)
    record = FileStateRecord(target, watch=False)
    await record.refresh()
    # The agent's own write, checkpointed by it (the fs/write_text_file seam).
    service.turns.record_pre_state(sid, "edited.txt", Entry.file(b"edited before\n", 0o644))
    await target.run(ControlProgram([WriteProject("edited.txt", b"written by the agent\n")]))
    reads = Passengers(tuple(service.turns.post_turn_reads(sid)))
    before = target.programs
    await record.changes(passengers=reads)
    # The walk, then the written file's snapshot (new to the record).
    assert target.programs - before == 2
    assert reads.results is not None and len(reads.results) == 1
    settling = target.programs
    await service.turns.settle(sid, read=(reads.ops, reads.results))
    assert target.programs - settling == 1  # the publication alone: no post-turn read of its own
    diff = await service.turns.diff(sid, contents=True)
    assert [(f.path, f.after.sha256) for f in diff.files] == [("edited.txt", hashlib.sha256(b"written by the agent\n").hexdigest())]
    await service.sessions.close(sid)


async def test_a_record_kept_by_the_settlement_starts_the_next_process_reading_nothing(tmp_path):
    target, service, sid = await _turn_in_flight(tmp_path)
    record = FileStateRecord(target, watch=False)
    await record.refresh()
    (tmp_path / "made.txt").write_bytes(b"new\n")
    await asyncio.sleep(2.1)  # not racy for the walk that records it
    await record.changes()
    withdraw = await keep_on_settlement(record, service.session(sid).lease)
    await service.turns.settle(sid)
    withdraw()
    # The next process: its first walk loads the kept record and reads no
    # file again (one program, no snapshot).
    after = FileStateRecord(Programs(LocalTarget(tmp_path)), watch=False)
    await after.refresh()
    assert after._target.programs == 1
    (tmp_path / "made.txt").write_bytes(b"changed\n")
    assert [(c.path, c.before.data) for c in await after.changes()] == [("made.txt", b"new\n")]
    await service.sessions.close(sid)


class StillClock(ProgramTarget):
    """A filesystem whose clock stands still: every time a walk or a
    snapshot reports is one instant long ago, so a change that keeps a
    file's size and inode shows in none of its facts (the worst case of
    coarse timestamps), and no walk finds a file racy by its times."""

    LONG_AGO = 1_600_000_000 * 10**9

    def __init__(self, inner) -> None:
        self.inner = inner
        self.programs = 0

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.programs += 1
        result = await self.inner.run(program)
        out = []
        for op, outcome in zip(program.operations, result.results):
            if outcome.ok and isinstance(op, ScanTree):
                outcome = OpResult(outcome.status, self._still_scan(outcome.value))
            elif outcome.ok and isinstance(op, SnapshotFile):
                outcome = OpResult(outcome.status, replace(outcome.value, mtime_ns=self.LONG_AGO, ctime_ns=self.LONG_AGO))
            out.append(outcome)
        return ProgramResult(tuple(out), result.stopped_at)

    def _still_scan(self, scan: FileScan) -> FileScan:
        facts = [(flags, size, self.LONG_AGO, self.LONG_AGO, inode, mode) for flags, size, _, _, inode, mode in scan.entries().values()]
        packed = b"".join(struct.pack(SCAN_FACTS, *fact) for fact in facts)
        return replace(scan, facts=packed, racy=())


async def _agent_writes(record: FileStateRecord, target, root, path: str, text: str) -> None:
    """The agent's ``fs/write_text_file`` as the engine runs it: the write's
    program snapshots what it wrote for the record."""
    snapshot = record.write_snapshot(path)
    outcome = await WorkspaceFiles(target, str(root)).write_text(str(root / path), text, read_before=True, then=snapshot)
    record.remember(path)
    record.written(path, snapshot, outcome.then)


def _rewrite_in_place(root, path: str, data: bytes) -> None:
    """A command's change of the same size, in the same inode."""
    with open(root / path, "r+b") as handle:
        handle.write(data)


async def test_the_file_the_agent_writes_is_snapshotted_by_its_write_and_the_record_stays_exact(tmp_path):
    (tmp_path / "f.txt").write_bytes(b"before\n")
    target = StillClock(LocalTarget(tmp_path))
    record = FileStateRecord(target, watch=False)
    await record.refresh()
    before = target.programs
    await _agent_writes(record, target, tmp_path, "f.txt", "agent's\n")
    await _agent_writes(record, target, tmp_path, "new.txt", "made by the agent\n")
    assert target.programs - before == 2  # the writes, each with its snapshot
    # A command rewrites the file right after the agent's write: nothing
    # in its facts shows it.
    _rewrite_in_place(tmp_path, "f.txt", b"command\n")
    before = target.programs
    # The agent's writes checkpointed both files: nothing to report.
    assert [c.path for c in await record.changes() if c.path.endswith(".txt")] == []
    assert target.programs - before == 1  # the walk alone: no snapshot program
    # The next turn's baseline: a file snapshotted before the walk that
    # recorded it is read again, in the walk's own program.
    before = target.programs
    await record.refresh()
    assert target.programs - before == 1
    (tmp_path / "f.txt").write_bytes(b"the next turn's command\n")
    (tmp_path / "new.txt").write_bytes(b"changed by a command\n")
    changes = {c.path: c.before.data for c in await record.changes() if c.path.endswith(".txt")}
    assert changes == {"f.txt": b"command\n", "new.txt": b"made by the agent\n"}


async def test_a_racy_file_of_the_kept_record_is_read_again_in_the_first_walk_s_program(tmp_path):
    (tmp_path / "f.txt").write_bytes(b"before\n")
    target = StillClock(LocalTarget(tmp_path))
    record = FileStateRecord(target, watch=False)
    await record.refresh()
    await _agent_writes(record, target, tmp_path, "f.txt", "agent's\n")
    await record.changes()
    ops, done = await record.keep_ops()  # the settlement keeps it for the next process
    done((await target.run(ControlProgram(ops))).results)
    # After that process, a command rewrites the file the agent wrote
    # (racy: snapshotted before the walk that recorded it).
    _rewrite_in_place(tmp_path, "f.txt", b"command\n")

    # The next process reads the kept record in the program that resumes
    # its session: its first walk's program re-reads the racy file.
    after = FileStateRecord(target, watch=False)
    after.preload((await target.run(ControlProgram(after.kept_reads()))).results)
    before = target.programs
    await after.refresh()
    assert target.programs - before == 1
    (tmp_path / "f.txt").write_bytes(b"the next turn's command\n")
    assert [(c.path, c.before.data) for c in await after.changes() if c.path == "f.txt"] == [("f.txt", b"command\n")]

    # Read in the walk's own program instead, the record learns only then
    # which files are racy: their re-read is a program of its own.
    _rewrite_in_place(tmp_path, "f.txt", b"the next turn's command\n"[::-1])
    unloaded = FileStateRecord(target, watch=False)
    before = target.programs
    await unloaded.refresh()
    assert target.programs - before == 2
