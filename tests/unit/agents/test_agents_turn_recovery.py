"""A turn's baseline held by the file-state record until its settlement
(``FileStateRecord.hold``) and what a turn a stopped process left in flight
changed against it (``stopped_turn_changes``): on real files through
``LocalTarget``, a live record and the recovery's own record side by side,
as a killed process and the next owner would have them."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from counted_programs import CountedPrograms as Programs
from mevedel_server.agents import stopped_turn_changes
from mevedel_server.agents.file_state import FileStateRecord
from mevedel_server.store import ClientIdentity, SessionService
from mevedel_server.targets import (
    ControlProgram,
    LocalTarget,
    ProgramTarget,
    ReadEntry,
    TargetError,
)
from mevedel_server.targets.program import Entry

SESSION = "2026-12-06T10-00-0123456789ab"
TURN = "00112233445566ff"
MAX = 1024 * 1024


def blobs(root) -> set[str]:
    return set(os.listdir(root / ".mevedel" / "file-state" / "blobs"))


async def held(root) -> FileStateRecord:
    """A live record of ``root``, refreshed and holding turn TURN's baseline
    (walked: every sync looks, as over SSH)."""
    record = FileStateRecord(LocalTarget(root), max_file_bytes=MAX, watch=False)
    await record.refresh()
    await record.hold(record.held_marker(SESSION, TURN))
    return record


@pytest.mark.parametrize("kept", [False, True], ids=["first-turn", "index-kept"])
async def test_holding_a_turns_baseline_keeps_the_record_in_the_same_program(tmp_path, kept):
    """A turn's walk leaves what it read to the hold that follows it
    (``refresh(keep=False)``): one program keeps the record and the
    baseline -- over SSH one round trip, where a workspace's first turn
    paid two (the whole index, then the marker naming it) -- and the next
    owner reads the baseline back whole."""
    (tmp_path / "a.txt").write_text("before\n")
    if kept:
        earlier = FileStateRecord(LocalTarget(tmp_path), max_file_bytes=MAX, watch=False)
        await earlier.refresh()
        await earlier.hold(earlier.held_marker(SESSION, "ffeeddccbbaa9988"))
        await earlier.release(earlier.held_marker(SESSION, "ffeeddccbbaa9988"))
        earlier.close()
    counted = Programs(LocalTarget(tmp_path))
    live = FileStateRecord(counted, max_file_bytes=MAX, watch=False)
    await live.refresh(keep=False)
    walked = counted.programs
    await live.hold(live.held_marker(SESSION, TURN))
    assert counted.programs - walked == 1
    assert (tmp_path / ".mevedel" / "file-state" / "index").is_file()
    (tmp_path / "a.txt").write_text("the agent's\n")
    found = await stopped_turn_changes(LocalTarget(tmp_path), SESSION, TURN, "", max_file_bytes=MAX)
    assert found is not None and found.lost is None
    assert [(path, state) for path, state, _gap in found.changes] == [("a.txt", Entry.file(b"before\n", 0o644))]
    live.close()


async def test_the_next_owner_finds_every_change_since_the_baseline_with_its_state_before(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "run.sh", 0o644)
    (tmp_path / "gone.txt").write_text("bye\n")
    (tmp_path / "old").mkdir()
    live = await held(tmp_path)
    # The turn's agent (a write, then a command), and the live record
    # moving on as it would after each command.
    (tmp_path / "notes.txt").write_text("the agent's\n")
    assert [c.path for c in await live.changes()] == ["notes.txt"]
    os.chmod(tmp_path / "run.sh", 0o755)
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "old").rmdir()
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "file.txt").write_text("made\n")
    os.symlink("notes.txt", tmp_path / "link.txt")
    await live.changes()
    # The process dies here: nothing more of it runs.
    found = await stopped_turn_changes(LocalTarget(tmp_path), SESSION, TURN, "", max_file_bytes=MAX)
    assert found is not None and found.lost is None
    before = {path: (state, gap) for path, state, gap in found.changes}
    assert before == {
        "notes.txt": (Entry.file(b"mine\n", 0o644), None),
        "run.sh": (Entry.file(b"#!/bin/sh\n", 0o644), None),
        "gone.txt": (Entry.file(b"bye\n", 0o644), None),
        "old": (Entry.directory(0o755), None),
        "new": (None, None),
        "new/file.txt": (None, None),
        "link.txt": (None, None),
    }
    # Settled: the baseline goes, and with it what kept the blobs.
    await found.finish()
    assert not os.listdir(tmp_path / ".mevedel" / "file-state" / "turns")
    assert await stopped_turn_changes(LocalTarget(tmp_path), SESSION, TURN, "", max_file_bytes=MAX) is None


async def test_no_baseline_held_means_nothing_to_recover(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    record = FileStateRecord(LocalTarget(tmp_path), max_file_bytes=MAX, watch=False)
    await record.refresh()  # the turn began, its agent was never dispatched
    (tmp_path / "a.txt").write_text("someone else\n")
    assert await stopped_turn_changes(LocalTarget(tmp_path), SESSION, TURN, "", max_file_bytes=MAX) is None


async def test_while_a_baseline_is_held_no_blob_it_names_is_removed_until_the_settlement_lets_it_go(tmp_path):
    (tmp_path / "a.txt").write_text("first\n")
    live = await held(tmp_path)
    kept = blobs(tmp_path)
    for round_ in range(3):  # the live record moves on: the old blobs are nobody's but the baseline's
        (tmp_path / "a.txt").write_text(f"change {round_}\n")
        await live.changes()
    assert kept <= blobs(tmp_path)
    # Another process (the next prompt) finds the baseline beside its own.
    other = FileStateRecord(LocalTarget(tmp_path), max_file_bytes=MAX, watch=False)
    await other.refresh()
    await other.hold(other.held_marker(SESSION, "ffeeddccbbaa9988"))
    assert [(s, t) for _, s, t in other.held_by_others(other.held_marker(SESSION, "ffeeddccbbaa9988"))] == [(SESSION, TURN)]
    (tmp_path / "a.txt").write_text("the other's change\n")
    await other.changes()
    assert kept <= blobs(tmp_path)
    found = await stopped_turn_changes(LocalTarget(tmp_path), SESSION, TURN, "", max_file_bytes=MAX)
    assert [(p, s) for p, s, _ in found.changes] == [("a.txt", Entry.file(b"first\n", 0o644))]
    # The settlements: the live record's removes its own baseline after
    # the commit; then, with none held, the record's walk removes the rest.
    ops, done = await live.keep_ops(release=live.held_marker(SESSION, TURN))
    done((await LocalTarget(tmp_path).run(ControlProgram(ops))).results)
    await other.release(other.held_marker(SESSION, "ffeeddccbbaa9988"))
    await other.release(other.held_by_others("")[0][0])
    assert not other.held_by_others("")
    await other.changes()
    await other.changes()
    assert not kept & blobs(tmp_path)  # nobody names them any more: gone


async def test_a_baseline_whose_whole_index_was_replaced_is_said_lost_never_taken_for_nothing_changed(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    await held(tmp_path)
    (tmp_path / "a.txt").write_text("changed\n")
    # Another process, never told of the baseline, keeps a whole index of its own.
    index = tmp_path / ".mevedel" / "file-state" / "index"
    index.write_bytes(index.read_bytes()[:-1] + b"\x00")
    found = await stopped_turn_changes(LocalTarget(tmp_path), SESSION, TURN, "", max_file_bytes=MAX)
    assert found is not None and not found.changes
    assert "replaced or damaged" in found.lost


async def test_a_write_where_no_walk_looks_is_named_ahead_of_it_and_recovered_as_a_gap(tmp_path):
    (tmp_path / ".gitignore").write_text("build/\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "out.txt").write_text("old\n")
    (tmp_path / "tracked.txt").write_text("t\n")
    live = await held(tmp_path)
    marker = live.held_marker(SESSION, TURN)
    assert live.written_ops(marker, "tracked.txt") == []  # the baseline knows it: nothing more to write
    ops = live.written_ops(marker, "build/out.txt")
    await LocalTarget(tmp_path).run(ControlProgram(ops))
    (tmp_path / "build" / "out.txt").write_text("new\n")
    found = await stopped_turn_changes(LocalTarget(tmp_path), SESSION, TURN, "", max_file_bytes=MAX)
    ((path, state, gap),) = found.changes
    assert path == "build/out.txt" and state is None and "does not look" in gap
    await found.finish()
    assert not os.listdir(tmp_path / ".mevedel" / "file-state" / "turns")


class ReadsCounted(ProgramTarget):
    """The workspace, counting the reads of each path and failing the next
    program that reads ``fail`` (a target that fails once)."""

    def __init__(self, inner) -> None:
        self.inner, self.reads, self.fail = inner, Counter(), None

    async def run(self, program: ControlProgram):
        paths = [op.path for op in program.operations if isinstance(op, ReadEntry)]
        if self.fail is not None and self.fail in paths:
            self.fail = None
            raise TargetError("run", "the connection dropped")
        self.reads.update(paths)
        return await self.inner.run(program)


async def stopped_turn(tmp_path) -> tuple[SessionService, ReadsCounted, str]:
    """A session whose turn in flight (one capture: notes.txt) was left by
    a process that held its baseline and then stopped, after a write to
    notes.txt and a command that made made.txt."""
    (tmp_path / "notes.txt").write_text("mine\n")
    target = ReadsCounted(LocalTarget(tmp_path))

    async def lookup(session_id, turn_id, working, max_file_bytes):
        return await stopped_turn_changes(LocalTarget(tmp_path), session_id, turn_id, working, max_file_bytes=max_file_bytes)

    service = SessionService(target, ClientIdentity("next", "desk"), stopped_turn_changes=lookup)
    sid = (await service.sessions.create()).session_id
    begun = await service.turns.begin_turn(sid, "change things", agent="scripted")
    live = FileStateRecord(LocalTarget(tmp_path), max_file_bytes=MAX, watch=False)
    await live.refresh()
    await live.hold(live.held_marker(sid, begun.turn_id))
    await service.turns.capture_file(sid, "notes.txt")
    (tmp_path / "notes.txt").write_text("the agent's\n")
    (tmp_path / "made.txt").write_text("made\n")
    return service, target, sid


async def test_aborting_a_stopped_turn_reads_each_file_after_it_once_and_records_every_change(tmp_path):
    service, target, sid = await stopped_turn(tmp_path)
    target.reads.clear()
    await service.turns.abort(sid, stopped=True)
    assert target.reads["notes.txt"] == 1 and target.reads["made.txt"] == 1
    diff = await service.turns.diff(sid, 1, 1)
    assert {item.path: item.change for item in diff.files} == {"notes.txt": "modified", "made.txt": "added"}
    assert not os.listdir(tmp_path / ".mevedel" / "file-state" / "turns")  # settled: its baseline let go


async def test_a_failed_read_after_a_stopped_turn_refuses_its_abort_and_the_abort_again_records_it(tmp_path):
    """Never settled with its files' states after it unknown: refused, as
    any settlement whose read fails, with the turn still in flight."""
    service, target, sid = await stopped_turn(tmp_path)
    target.fail = "made.txt"
    with pytest.raises(TargetError, match="the connection dropped"):
        await service.turns.abort(sid, stopped=True)
    assert service.turns.turn_in_flight(sid) == 1
    await service.turns.abort(sid, stopped=True)
    diff = await service.turns.diff(sid, 1, 1)
    assert {item.path: item.change for item in diff.files} == {"notes.txt": "modified", "made.txt": "added"}
