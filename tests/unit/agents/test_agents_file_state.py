"""The file-state record an agent's shell commands are checkpointed with:
what a command created, changed or deleted, with the content from before
it; .gitignore, size limit, links, FIFOs and blobs -- on real files through
LocalTarget, and over SSH."""

from __future__ import annotations

import asyncio
import hashlib
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from counted_programs import CountedPrograms as Programs
from mevedel_server.agents import file_state, file_state_table
from mevedel_server.agents.file_state import (
    IGNORED_GAP,
    LOST_BLOB_GAP,
    FileChange,
    FileStateError,
    FileStateRecord,
)
from mevedel_server.targets import (
    ControlProgram,
    FileScan,
    LocalTarget,
    OpResult,
    ProgramResult,
    ProgramTarget,
    ScanTree,
    SnapshotFile,
    TargetOperationError,
    tree_watch,
)
from mevedel_server.targets.executor import SCAN_FACTS
from mevedel_server.targets.program import Entry

STORE = ".mevedel/file-state/blobs"
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

async def files_only(record) -> list:
    """``record.changes()`` with each regular file's earlier state as its
    bytes, and directories left out: the tests of this file are about
    content (modes, directories and links have tests of their own, in
    test_agents_file_state_modes.py)."""
    out = []
    root = getattr(record._target, "root", None) or (record._local.root if record._local is not None else None)
    for change in await record.changes():
        before = change.before
        if before is not None and before.kind == Entry.DIRECTORY:
            continue
        if before is None and change.gap is None and root is not None and os.path.isdir(os.path.join(root, change.path)):
            continue
        if before is not None and before.kind == Entry.FILE and before.data is not None:
            change = FileChange(change.path, before.data, change.gap)
        out.append(change)
    return out


def write(root, path: str, data: bytes | str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data.encode() if isinstance(data, str) else data)


def stored(root) -> set[str]:
    """The names in the blob store (packs, and loose blobs of old)."""
    store = root / STORE
    return set(os.listdir(store)) if store.exists() else set()


async def blobs(record, root, store: str = STORE) -> set[str]:
    """The digests whose bytes ``record`` can read back from disk, checked;
    and, once its removals ran, the store holds no pack the record does not
    name (a pack of superseded bytes is removed)."""
    if record._pruning is not None:
        await record._pruning
    found = set()
    for path, name, pack, offset in record._table.located():
        size = struct.unpack(SCAN_FACTS, record._table.facts_of(path))[1]
        with open(root / store / pack, "rb") as handle:
            handle.seek(offset)
            if hashlib.sha256(handle.read(size)).hexdigest() == name:
                found.add(name)
    packs = {name for name in os.listdir(root / store) if name.startswith("pack-")}
    assert packs == set(record._table.live_packs()), (packs, record._table.live_packs())
    return found


def digest(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


class Spy(ProgramTarget):
    """A target that remembers every operation it was asked to run."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.ops: list = []

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.ops.extend(program.operations)
        return await self.inner.run(program)

    def reads(self) -> list[str]:
        """Files read: a read of the blob store is ``blob``."""
        return ["blob" if op.path.startswith(".mevedel/file-state/") else op.path
                for op in self.ops if type(op).__name__ in ("Read", "ReadSlice", "SnapshotFile")]

    def snapshots(self) -> list[str]:
        return [op.path for op in self.ops if isinstance(op, SnapshotFile)]


async def record_of(root, **options) -> FileStateRecord:
    record = FileStateRecord(LocalTarget(root), **options)
    await record.refresh()
    return record


# -- what a command changed --------------------------------------------------------


async def test_created_modified_and_deleted_files_come_with_their_content_from_before(root):
    write(root, "src/app.py", "print('v1')\n")
    write(root, "README", "readme\n")
    write(root, "old/notes.txt", "notes\n")
    write(root, "old/more.txt", "more\n")
    write(root, "same.txt", "unchanged\n")
    record = await record_of(root)

    write(root, "src/app.py", "print('v2')\n")
    write(root, "src/new.py", "new\n")
    os.remove(root / "README")
    for name in ("notes.txt", "more.txt"):
        os.remove(root / "old" / name)
    (root / "old").rmdir()
    (root / "same.txt").touch()  # facts change, content does not

    assert await files_only(record) == [
        FileChange("README", b"readme\n"),
        FileChange("old/more.txt", b"more\n"),
        FileChange("old/notes.txt", b"notes\n"),
        FileChange("src/app.py", b"print('v1')\n"),
        FileChange("src/new.py", None),
    ]
    assert await files_only(record) == []  # the record moved on


async def test_a_file_dated_past_2262_is_recorded_kept_and_its_change_found(root):
    # A record holds times as signed 64-bit nanoseconds: a file dated later
    # (a touch -d of a far year) is recorded with its time clamped, kept in
    # the index for the next process, and its change found with its bytes.
    write(root, "future.txt", "from the future\n")
    far = 2**63 + 10**12
    try:
        os.utime(root / "future.txt", ns=(far, far))
    except (OSError, OverflowError):
        pytest.skip("this system sets no such time")
    if os.stat(root / "future.txt").st_mtime_ns != far:
        pytest.skip("this filesystem holds no such time")
    record = await record_of(root)
    record.close()
    second = FileStateRecord(LocalTarget(root))
    await second.refresh()
    assert second._from_index
    write(root, "future.txt", "now\n")
    assert await files_only(second) == [FileChange("future.txt", b"from the future\n")]
    second.close()


async def test_unchanged_files_are_not_reported_and_not_read_again(root, monkeypatch):
    # A short racy window, so that files written by the test count as old
    # once it has passed (a file written within it is read again, once).
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    for i in range(40):
        write(root, f"d{i % 4}/f{i}.txt", f"content {i}\n")
    await asyncio.sleep(0.1)
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy)
    await record.refresh()
    assert len(spy.snapshots()) == 40
    write(root, "d1/f1.txt", "changed\n")
    spy.ops.clear()
    assert await files_only(record) == [FileChange("d1/f1.txt", b"content 1\n")]
    assert sorted(spy.reads()) == ["blob", "d1/f1.txt"]
    await asyncio.sleep(0.1)
    spy.ops.clear()
    await record.refresh()  # d1/f1.txt was written within the window: once more
    assert spy.snapshots() == ["d1/f1.txt"]
    spy.ops.clear()
    await record.refresh()
    # One walk (the record's save for the next process rides in its program).
    walked = [type(op).__name__ for op in spy.ops if type(op).__name__ not in ("MakeDirs", "Replace", "Remove")]
    assert spy.reads() == [] and walked == ["ScanTree"]


async def test_a_file_changed_by_two_commands_reports_the_right_before_each_time(root):
    write(root, "f.txt", "one")
    record = await record_of(root)
    write(root, "f.txt", "two")
    assert await files_only(record) == [FileChange("f.txt", b"one")]
    await record.refresh()
    write(root, "f.txt", "three")
    assert await files_only(record) == [FileChange("f.txt", b"two")]
    await record.refresh()
    os.remove(root / "f.txt")
    assert await files_only(record) == [FileChange("f.txt", b"three")]
    await record.refresh()
    write(root, "f.txt", "four")
    assert await files_only(record) == [FileChange("f.txt", None)]


async def test_changes_between_commands_are_absorbed_by_refresh(root):
    write(root, "f.txt", "one")
    record = await record_of(root)
    write(root, "f.txt", "edited by the person, not the command")
    await record.refresh()
    write(root, "f.txt", "the command's")
    assert await files_only(record) == [FileChange("f.txt", b"edited by the person, not the command")]


async def test_a_change_its_facts_do_not_show_is_found_for_a_file_written_just_before(root):
    # A coarse clock: the second walk sees the first one's times again, as a
    # filesystem with one-second timestamps would within the same second.
    write(root, "f.txt", "AAAA")
    write(root, "g.txt", "BBBB")
    target = CoarseClock(LocalTarget(root))
    record = FileStateRecord(target)
    await record.refresh()
    with open(root / "f.txt", "r+b") as handle:
        handle.write(b"CCCC")  # same size, same inode
    target.freeze = True
    assert await files_only(record) == [FileChange("f.txt", b"AAAA")]


class CoarseClock(ProgramTarget):
    """Once ``freeze`` is set, every walked entry keeps the times it had at
    the walk before."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.freeze = False
        self.seen: dict[str, tuple] = {}

    async def run(self, program: ControlProgram) -> ProgramResult:
        result = await self.inner.run(program)
        out = []
        for op, outcome in zip(program.operations, result.results):
            if isinstance(op, ScanTree) and outcome.ok:
                outcome = OpResult(outcome.status, self._coarse(outcome.value))
            out.append(outcome)
        return ProgramResult(tuple(out), result.stopped_at)

    def _coarse(self, scan: FileScan) -> FileScan:
        entries = scan.entries()
        if self.freeze:
            entries = {path: self.seen.get(path, facts) for path, facts in entries.items()}
        else:
            self.seen = dict(entries)
        packed = b"".join(struct.pack(SCAN_FACTS, *facts) for facts in entries.values())
        names = "".join(path + "\0" for path in entries)
        return FileScan(names, packed, scan.unwalked, scan.racy, scan.truncated, scan.started_ns)


class FailingSnapshots(ProgramTarget):
    """Fails the next ``fail`` programs that snapshot a file."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.fail = 0

    async def run(self, program: ControlProgram) -> ProgramResult:
        if self.fail and any(isinstance(op, SnapshotFile) for op in program.operations):
            self.fail -= 1
            raise TargetOperationError("x", "the connection dropped")
        return await self.inner.run(program)


async def test_a_walk_that_fails_midway_leaves_the_record_as_it_was(root):
    write(root, "a.txt", "a1")
    write(root, "c.txt", "c1")
    target = FailingSnapshots(LocalTarget(root))
    record = FileStateRecord(target)
    await record.refresh()
    write(root, "a.txt", "a2")
    os.rename(root / "c.txt", root / "b.txt")
    target.fail = 1
    with pytest.raises(TargetOperationError):
        await files_only(record)
    os.rename(root / "b.txt", root / "c.txt")  # the same names as the record's walk again
    assert await files_only(record) == [FileChange("a.txt", b"a1")]
    write(root, "c.txt", "c2")
    assert await files_only(record) == [FileChange("c.txt", b"c1")]


async def test_changes_before_any_refresh_is_refused(root):
    with pytest.raises(FileStateError):
        await FileStateRecord(LocalTarget(root)).changes()


# -- what cannot be captured ---------------------------------------------------------


async def test_an_ignored_file_is_never_read_and_its_changes_are_gaps(root):
    write(root, ".gitignore", "*.log\n")
    write(root, "keep.txt", "kept")
    write(root, "app.log", "log one")
    write(root, "gone.log", "log two")
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy)
    await record.refresh()
    write(root, "app.log", "log changed")
    os.remove(root / "gone.log")
    write(root, "new.log", "log three")
    assert await files_only(record) == [
        FileChange("app.log", None, IGNORED_GAP),
        FileChange("gone.log", None, IGNORED_GAP),
        FileChange("new.log", None, IGNORED_GAP),
    ]
    assert not [path for path in spy.reads() if path.endswith(".log")]
    assert digest("log one") not in await blobs(record, root)


async def test_an_ignored_directory_is_not_entered_and_a_change_inside_is_not_seen(root):
    write(root, ".gitignore", "node_modules/\nsub/build/\n")
    write(root, "node_modules/pkg/index.js", "module")
    write(root, "sub/build/out.o", "object")
    write(root, "sub/src.c", "source")
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy)
    await record.refresh()
    assert not [path for path in spy.reads() if "node_modules" in path or "build" in path]
    write(root, "node_modules/pkg/index.js", "changed")
    write(root, "node_modules/new/x.js", "new")
    os.remove(root / "sub/build/out.o")
    write(root, "sub/src.c", "changed source")
    assert await files_only(record) == [FileChange("sub/src.c", b"source")]


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "walked"])
async def test_a_file_the_agent_wrote_in_an_ignored_directory_is_looked_at_not_its_directory(root, watched):
    # build/out.txt was written by the agent's fs/write_text_file (which
    # checkpointed it): the record remembers it and stats it at every sync,
    # so a shell command's change, mode change and removal are captured as
    # for a tracked file -- and so in a new process, from the index. A new
    # file a command makes in build/ stays unseen: build/ is never walked.
    write(root, ".gitignore", "build/\n")
    write(root, "src.c", "source")
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, watch=LocalTarget(root) if watched else False)
    await record.refresh()
    assert (record.unwatched is None) == watched
    write(root, "build/out.txt", "written by the agent")  # its fs write...
    record.remember("build/out.txt")  # ...tells the record
    assert await files_only(record) == []  # the write's own capture holds it
    write(root, "build/out.txt", "changed by a command")
    write(root, "build/new.txt", "made by a command")
    assert await files_only(record) == [FileChange("build/out.txt", b"written by the agent")]
    os.chmod(root / "build/out.txt", 0o755)
    changes = await record.changes()
    assert [(c.path, c.before.data, c.before.mode & 0o777) for c in changes] == [("build/out.txt", b"changed by a command", 0o644)]
    record.close()
    # build/ entered only on the way to the one path, never walked.
    scans = [op for op in spy.ops if isinstance(op, ScanTree) and "build" in op.descend]
    assert scans and all(type(op).__name__ == "ScanPaths" and op.paths == ("build/out.txt",) for op in scans)

    # A new process, from the index the first one kept.
    again = FileStateRecord(LocalTarget(root), watch=None if watched else False)
    await again.refresh()
    assert again._from_index
    write(root, "build/out.txt", "changed again")
    assert await files_only(again) == [FileChange("build/out.txt", b"changed by a command")]
    os.remove(root / "build/out.txt")
    assert await files_only(again) == [FileChange("build/out.txt", b"changed again")]
    # Gone, it is forgotten: a file a command makes there again is unseen.
    write(root, "build/out.txt", "made by a command")
    assert await files_only(again) == []
    again.close()


async def test_a_remembered_path_outside_an_ignored_directory_is_left_to_the_walk(root):
    write(root, "src.c", "source")
    record = await record_of(root)
    write(root, "src.c", "by the agent")
    record.remember("src.c")
    record.remember("missing/never.txt")
    assert await files_only(record) == [FileChange("src.c", b"source")]
    assert not record._known
    record.close()


async def test_a_file_that_becomes_ignored_while_the_command_changes_it_keeps_its_before(root):
    write(root, "gen/out.txt", "generated v1")
    write(root, "gen/other.txt", "untouched")
    record = await record_of(root)
    write(root, ".gitignore", "gen/\n")
    write(root, "gen/out.txt", "generated v2")
    assert await files_only(record) == [FileChange(".gitignore", None), FileChange("gen/out.txt", b"generated v1")]
    # Now ignored: no blob kept for them, and the directory is no longer entered.
    await record.refresh()
    assert digest("untouched") not in await blobs(record, root)
    write(root, "gen/other.txt", "changed, unseen")
    assert await files_only(record) == []


async def test_files_found_where_the_last_walk_did_not_look_are_gaps_not_creations(root):
    write(root, ".gitignore", "vendor/\n")
    write(root, "vendor/lib.py", "vendored")
    record = await record_of(root)
    write(root, ".gitignore", "")
    # The command un-ignored vendor/: lib.py was there before, unknown to us.
    assert await files_only(record) == [
        FileChange(".gitignore", b"vendor/\n"),
        FileChange("vendor/lib.py", None, IGNORED_GAP),
    ]
    await record.refresh()
    write(root, "vendor/lib.py", "changed")
    assert await files_only(record) == [FileChange("vendor/lib.py", b"vendored")]


async def test_a_nested_gitignore_and_negation_are_respected(root):
    write(root, ".gitignore", "*.tmp\n")
    write(root, "pkg/.gitignore", "!keep.tmp\n")
    write(root, "pkg/keep.tmp", "kept")
    write(root, "pkg/drop.tmp", "dropped")
    record = await record_of(root)
    write(root, "pkg/keep.tmp", "kept 2")
    write(root, "pkg/drop.tmp", "dropped 2")
    assert await files_only(record) == [FileChange("pkg/drop.tmp", None, IGNORED_GAP), FileChange("pkg/keep.tmp", b"kept")]


async def test_a_file_over_the_limit_is_recorded_by_its_facts_and_its_change_is_a_gap(root):
    write(root, "big.bin", b"x" * 101)
    write(root, "small.bin", b"x" * 100)
    write(root, "shrinks.bin", b"y" * 150)
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, max_file_bytes=100)
    await record.refresh()
    assert "big.bin" not in spy.reads() and digest(b"x" * 101) not in await blobs(record, root)
    write(root, "big.bin", b"z" * 101)
    write(root, "small.bin", b"x" * 200)  # grows past the limit: its before is known
    write(root, "shrinks.bin", b"y")
    write(root, "new-big.bin", b"n" * 300)
    mode = os.stat(root / "big.bin").st_mode & 0o7777
    # Over the limit before: known by its mode and size only (the seam
    # makes it a gap); created by the command: nothing was there, whatever
    # its size now.
    assert await files_only(record) == [
        FileChange("big.bin", Entry(Entry.FILE, mode, None, 101)),
        FileChange("new-big.bin", None),
        FileChange("shrinks.bin", Entry(Entry.FILE, mode, None, 150)),
        FileChange("small.bin", b"x" * 100),
    ]
    await record.refresh()
    os.remove(root / "shrinks.bin")  # under the limit now: captured since
    assert await files_only(record) == [FileChange("shrinks.bin", b"y")]


async def test_symbolic_links_are_recorded_by_their_target_and_never_followed(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret bytes outside the workspace")
    (outside / "dir").mkdir()
    (outside / "dir" / "inner").write_bytes(b"inner secret")
    (root / "to-secret").symlink_to(outside / "secret")
    (root / "to-dir").symlink_to(outside / "dir")
    write(root, "plain.txt", "plain")
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy)
    await record.refresh()
    assert spy.snapshots() == ["plain.txt"]
    spy.ops.clear()
    (root / "to-secret").unlink()
    (root / "to-secret").symlink_to(outside / "dir" / "inner")
    (root / "to-dir").unlink()
    (root / "new-link").symlink_to("plain.txt")
    os.remove(root / "plain.txt")
    (root / "plain.txt").symlink_to(outside / "secret")  # a file replaced by a link
    assert await files_only(record) == [
        FileChange("new-link", None),
        FileChange("plain.txt", b"plain"),
        FileChange("to-dir", Entry.symlink(os.fsencode(outside / "dir"))),
        FileChange("to-secret", Entry.symlink(os.fsencode(outside / "secret"))),
    ]
    # Only the blob of plain.txt's earlier bytes was read: no link, nothing
    # behind one. (plain.txt, racy since its first walk, is snapshotted
    # again in the walk's program, before the walk is seen: on a link
    # there that fails closed.)
    assert spy.reads() == ["plain.txt", "blob"]
    packed = b"".join((root / STORE / name).read_bytes() for name in stored(root))
    assert b"secret" not in packed


async def test_a_fifo_in_the_tree_does_not_block(root):
    write(root, "a.txt", "a")
    os.mkfifo(root / "pipe")
    record = FileStateRecord(LocalTarget(root))
    await asyncio.wait_for(record.refresh(), 30)
    os.mkfifo(root / "another")
    write(root, "a.txt", "b")
    assert await asyncio.wait_for(files_only(record), 30) == [FileChange("a.txt", b"a")]


@pytest.mark.skipif(AS_ROOT, reason="root reads every directory")
async def test_a_directory_that_cannot_be_read_keeps_what_was_known_below_it(root):
    write(root, "locked/a.txt", "a")
    write(root, "open.txt", "o")
    record = await record_of(root)
    (root / "locked").chmod(0)
    try:
        write(root, "open.txt", "changed")
        assert await files_only(record) == [FileChange("open.txt", b"o")]
    finally:
        (root / "locked").chmod(0o700)
    write(root, "locked/a.txt", "changed")
    assert await files_only(record) == [FileChange("locked/a.txt", b"a")]


# -- blobs ------------------------------------------------------------------------------


async def test_changes_past_the_digest_searches_give_earlier_bytes_and_one_blob_per_digest(root):
    """Past ``SEARCHES`` lookups of a digest the record indexes its digest
    column: many files sharing content, all changed, still give each its
    earlier bytes, and the store keeps one blob per digest."""
    count = file_state_table.SEARCHES * 2
    for i in range(count):
        write(root, f"d/f{i:03d}.txt", f"v1 {i % 5}")
    record = await record_of(root)
    for i in range(count):
        write(root, f"d/f{i:03d}.txt", f"v2 {i % 7}")
    assert await files_only(record) == [FileChange(f"d/f{i:03d}.txt", f"v1 {i % 5}".encode()) for i in range(count)]
    assert record._table._digest_row is not None  # the index, not a search each
    await record.refresh()
    assert await blobs(record, root) == {digest(f"v2 {k}") for k in range(7)}
    write(root, "d/f000.txt", "v3")
    assert await files_only(record) == [FileChange("d/f000.txt", b"v2 0")]


async def test_blobs_are_written_once_per_digest_and_removed_when_unreferenced(root):
    write(root, "a.txt", "shared")
    write(root, "b.txt", "shared")
    write(root, "c.txt", "own")
    record = await record_of(root)
    assert await blobs(record, root) == {digest("shared"), digest("own")}
    where = record._table.location_of("a.txt")
    write(root, "d.txt", "shared")  # a new file with a digest already stored
    await record.refresh()
    assert record._table.location_of("d.txt") == record._table.location_of("a.txt") == where
    await record.refresh()  # the pack of the copy just read goes
    assert await blobs(record, root) == {digest("shared"), digest("own")}

    write(root, "a.txt", "changed")
    write(root, "c.txt", "own, changed")
    assert await files_only(record) == [FileChange("a.txt", b"shared"), FileChange("c.txt", b"own")]
    # No file names "own" any more: the next walk removes it (no round trip
    # of its own); "shared" is still named by b.txt and d.txt.
    await record.refresh()
    assert await blobs(record, root) == {digest("shared"), digest("changed"), digest("own, changed")}
    os.remove(root / "b.txt")
    os.remove(root / "d.txt")
    assert await files_only(record) == [FileChange("b.txt", b"shared"), FileChange("d.txt", b"shared")]
    await record.refresh()
    assert await blobs(record, root) == {digest("changed"), digest("own, changed")}
    # The packs hold no more than the bytes named.
    assert sum(os.path.getsize(root / STORE / name) for name in stored(root)) == len("changed") + len("own, changed")


async def test_a_blob_named_again_before_its_removal_is_kept(root):
    write(root, "a.txt", "first")
    record = await record_of(root)
    write(root, "a.txt", "second")
    assert await files_only(record) == [FileChange("a.txt", b"first")]
    write(root, "b.txt", "first")  # "first" is named again before the next walk
    await record.refresh()
    assert await blobs(record, root) == {digest("first"), digest("second")}
    os.remove(root / "b.txt")
    assert await files_only(record) == [FileChange("b.txt", b"first")]


async def test_the_first_refresh_clears_blobs_an_earlier_process_left(root):
    write(root, "a.txt", "current")
    write(root, f"{STORE}/{digest('stale')}", "stale")
    write(root, f"{STORE}/.{digest('x')}.0a1b.tmp", "debris")
    write(root, f"{STORE}/pack-0123", "a pack no record names")
    record = await record_of(root)
    await record.refresh()
    assert await blobs(record, root) == {digest("current")}
    assert len(stored(root)) == 1


async def test_small_packs_are_merged_and_every_blob_still_reads_back(root, monkeypatch):
    # Each command that changes files leaves a pack of its own; past
    # MAX_PACKS a save merges them, keeping only the bytes still named.
    monkeypatch.setattr(file_state, "MAX_PACKS", 3)
    for i in range(6):
        write(root, f"f{i}.txt", f"v0 of {i}")
    record = await record_of(root)
    for i in range(6):
        write(root, f"f{i}.txt", f"v1 of {i}")
        assert await files_only(record) == [FileChange(f"f{i}.txt", f"v0 of {i}".encode())]
        await record.refresh()
    live = await blobs(record, root)
    assert live == {digest(f"v1 of {i}") for i in range(6)}
    assert len(stored(root)) <= 4
    # The packs hold the live bytes and at most the last few superseded ones.
    assert sum(os.path.getsize(root / STORE / name) for name in stored(root)) <= 6 * len("v1 of 0") + 3 * len("v0 of 0")
    record.close()
    again = await record_of(root)  # a new process, from the index
    for i in range(6):
        write(root, f"f{i}.txt", "v2")
    assert await files_only(again) == [FileChange(f"f{i}.txt", f"v1 of {i}".encode()) for i in range(6)]


async def test_a_damaged_blob_is_a_gap_not_wrong_content(root):
    write(root, "a.txt", "original")
    record = await record_of(root)
    ((_path, _digest, pack, offset),) = record._table.located()
    (root / STORE / pack).write_bytes(b"tampered")
    write(root, "a.txt", "changed")
    assert await files_only(record) == [FileChange("a.txt", None, LOST_BLOB_GAP)]


async def test_the_blob_store_and_mevedel_state_are_never_walked(root):
    write(root, ".mevedel/sessions/s/session.json", "{}")
    write(root, "work/.git/HEAD", "ref")
    write(root, "a.txt", "a")
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, blob_dir="cache/state")
    await record.refresh()
    assert set(spy.snapshots()) == {"a.txt"}
    write(root, ".mevedel/sessions/s/session.json", "{changed}")
    write(root, "a.txt", "b")
    assert await files_only(record) == [FileChange("a.txt", b"a")]
    await record.refresh()
    assert await blobs(record, root, "cache/state/blobs") == {digest("b")}


async def test_the_record_keeps_facts_and_digests_not_contents(root):
    for i in range(20):
        write(root, f"f{i}", os.urandom(1000))
    record = await record_of(root)

    def sizes(value, seen=None) -> int:
        if isinstance(value, (bytes, bytearray)):
            return len(value)
        if isinstance(value, dict):
            return sum(sizes(k) + sizes(v) for k, v in value.items())
        if isinstance(value, (list, tuple, set, frozenset)):
            return sum(sizes(v) for v in value)
        return 0

    held = sum(sizes(v) for k, v in vars(record).items() if k != "_same_as")
    assert held < 1000  # the packed facts of the last walk aside: no contents


# -- the index a new process starts from ------------------------------------------------


async def test_a_new_record_starts_from_the_index_and_reads_only_what_changed(root, monkeypatch):
    # Every ``mevedel prompt`` is a new process: its record starts from the
    # one the last process kept, and reads only the files changed since.
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    for i in range(40):
        write(root, f"d{i % 4}/f{i}.txt", f"content {i}\n")
    write(root, "over.bin", b"x" * 2000)
    os.symlink("d0/f0.txt", root / "link")
    await asyncio.sleep(0.1)
    first = await record_of(root, max_file_bytes=1000)
    write(root, "d1/f1.txt", "changed by the command\n")
    assert await files_only(first) == [FileChange("d1/f1.txt", b"content 1\n")]
    first.close()
    await asyncio.sleep(0.1)

    write(root, "d2/f2.txt", "edited between the processes\n")
    spy = Spy(LocalTarget(root))
    second = FileStateRecord(spy, max_file_bytes=1000)
    await second.refresh()
    # The file the last process read just after its change (racy then), and
    # the one edited since: nothing else.
    assert sorted(spy.snapshots()) == ["d1/f1.txt", "d2/f2.txt"]
    write(root, "d2/f2.txt", "the second command's\n")
    write(root, "d3/f3.txt", "and this\n")
    os.remove(root / "link")
    os.remove(root / "over.bin")
    changes = await second.changes()
    assert [(c.path, c.before, c.gap) for c in changes] == [
        ("d2/f2.txt", Entry.file(b"edited between the processes\n", 0o644), None),
        ("d3/f3.txt", Entry.file(b"content 3\n", 0o644), None),
        ("link", Entry.symlink(b"d0/f0.txt"), None),
        ("over.bin", Entry(Entry.FILE, 0o644, None, 2000), None),
    ]
    second.close()


@pytest.mark.skipif(not tree_watch.inotify_available(), reason="no inotify here")
async def test_a_primed_record_takes_as_baseline_what_changed_before_its_refresh(root, monkeypatch):
    # The first walk begins while the agent starts (prime); what changes
    # before the turn's refresh -- the agent's own start-up writing a file
    # -- is the turn's baseline, not a change of its command, exactly as
    # when the walk begins at the refresh.
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    for i in range(20):
        write(root, f"d{i % 2}/f{i}", f"v{i}")
    await asyncio.sleep(0.1)
    (await record_of(root)).close()
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, watch=LocalTarget(root))
    record.prime()
    priming = record._priming
    record.prime()  # once
    assert priming is not None and record._priming is priming
    await priming
    assert record._primed
    def whole_walks():
        return [op for op in spy.ops if type(op).__name__ == "ScanPaths" and "" in op.paths]

    assert len(whole_walks()) == 1
    write(root, "d0/f0", "written by the agent's start-up")
    write(root, "d1/new", "made by the agent's start-up")
    await record.refresh()
    assert len(whole_walks()) == 1  # no walk again: the two paths the watch named looked at
    write(root, "d1/f1", "the command's")
    write(root, "d0/f0", "the command's too")
    assert await files_only(record) == [FileChange("d0/f0", b"written by the agent's start-up"), FileChange("d1/f1", b"v1")]
    record.close()
    # Walked (no watch), priming does nothing: the refresh walks once.
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, watch=False)
    record.prime()
    await asyncio.sleep(0.05)
    assert not spy.ops and not record._primed
    record.close()


@pytest.mark.skipif(not tree_watch.inotify_available(), reason="no inotify here")
async def test_a_watched_record_from_the_index_walks_once(root, monkeypatch):
    # Watching the directories the kept record knows before the first walk
    # spares the second walk a watch begun after it would need.
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    for i in range(30):
        write(root, f"d{i % 3}/sub/f{i}", f"v{i}")
    await asyncio.sleep(0.1)
    (await record_of(root)).close()
    write(root, "d3/new", "a directory the index does not know")
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, watch=LocalTarget(root))
    await record.refresh()
    walks = [op for op in spy.ops if type(op).__name__ == "ScanPaths"]
    assert len(walks) == 2 and record.unwatched is None  # the new directory alone made it walk again
    spy.ops.clear()
    write(root, "d1/sub/f1", "changed")
    assert await files_only(record) == [FileChange("d1/sub/f1", b"v1")]
    assert not [op for op in spy.ops if type(op).__name__ == "ScanTree"]
    record.close()
    (await record_of(root)).close()
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, watch=LocalTarget(root))
    await record.refresh()
    assert len([op for op in spy.ops if type(op).__name__ == "ScanPaths"]) == 1
    write(root, "d3/new", "changed in a directory watched from the index")
    assert await files_only(record) == [FileChange("d3/new", b"a directory the index does not know")]
    record.close()


# -- a first walk reads as it goes ------------------------------------------------------


def _tree_to_capture(root) -> None:
    write(root, ".gitignore", "*.log\n")
    write(root, "src/a.py", "v1")
    write(root, "b.txt", "same")
    write(root, "src/c.txt", "same")
    write(root, "x.log", "log")
    os.symlink("b.txt", root / "to-b")


async def _preloaded(record: FileStateRecord, target) -> FileStateRecord:
    """``record`` given the kept reads as another's program ran them (a
    ``mevedel prompt``'s resume): a walked record then knows, before its
    walk's program, that nothing was kept."""
    record.preload((await target.run(ControlProgram(record.kept_reads()))).results)
    return record


async def _first_walk_reads_as_it_goes(root, target, record: FileStateRecord) -> None:
    spy = Spy(target)
    record._target = spy
    await record.refresh()
    scans = [op for op in spy.ops if isinstance(op, ScanTree)]
    # One walk read every file (the link's target by an operation of its
    # own), into one pack; none was snapshotted apart.
    assert [op.capture_pack is not None for op in scans][:1] == [True] and spy.snapshots() == []
    assert [name for name in stored(root) if name.startswith("pack-")] == [scans[0].capture_pack]
    assert await blobs(record, root) == {digest("v1"), digest("same"), digest("*.log\n")}
    mode = os.stat(root / "b.txt").st_mode & 0o7777
    write(root, "src/a.py", "v2")
    os.remove(root / "b.txt")
    os.remove(root / "to-b")
    write(root, "x.log", "log 2")
    assert await record.changes() == [
        FileChange("b.txt", Entry.file(b"same", mode)),
        FileChange("src/a.py", Entry.file(b"v1", mode)),
        FileChange("to-b", Entry.symlink(b"b.txt")),
        FileChange("x.log", None, IGNORED_GAP),
    ]


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "walked"])
async def test_a_first_walk_reads_every_file_as_it_goes(root, watched):
    _tree_to_capture(root)
    target = LocalTarget(root)
    record = FileStateRecord(target, watch=None if watched else False)
    if not watched:
        await _preloaded(record, target)
    await _first_walk_reads_as_it_goes(root, target, record)
    record.close()


async def test_over_ssh_a_first_walk_reads_every_file_in_its_own_program(root, fault_server):
    from mevedel_server.targets.ssh import SshTarget

    _tree_to_capture(root)
    target = await SshTarget.connect(fault_server.url(root), **fault_server.options())
    try:
        await _first_walk_reads_as_it_goes(root, target, await _preloaded(FileStateRecord(target), target))
    finally:
        await target.close()


async def test_a_file_changed_between_the_reading_walk_and_the_watched_one_is_read_again(root):
    # Watched, the first walk is walked again once its directories are
    # watched: what changed in between is read as it is then.
    write(root, "d/a.txt", "as read")
    write(root, "d/b.txt", "b")

    class ChangingAfterCapture(Spy):
        async def run(self, program):
            result = await super().run(program)
            if any(isinstance(op, ScanTree) and op.capture_pack is not None for op in program.operations):
                write(root, "d/a.txt", "changed before the watch")
            return result

    spy = ChangingAfterCapture(LocalTarget(root))
    record = FileStateRecord(spy, watch=LocalTarget(root))
    await record.refresh()
    assert spy.snapshots() == ["d/a.txt"]
    write(root, "d/a.txt", "by the command")
    assert await files_only(record) == [FileChange("d/a.txt", b"changed before the watch")]
    record.close()


@pytest.mark.parametrize("watched", [False, True], ids=["walked", "watched"])
async def test_a_new_record_walks_a_directory_ignored_since_the_index_was_kept(root, watched):
    # The kept record tracks gen/out.txt; between the processes gen/ came to
    # be ignored and the file changed. The new process's first walk enters
    # gen/ (its baseline is the file as it is now, recorded ignored), as
    # the last process's walk would have: a command's change there is then
    # not seen (an ignored directory), and never charged with the bytes of
    # two processes ago as its "before".
    if watched and not tree_watch.inotify_available():
        pytest.skip("no inotify here")
    write(root, "gen/out.txt", "kept by the first process")
    write(root, "gen/old.txt", "old")
    write(root, "src.txt", "source")
    (await record_of(root)).close()
    write(root, ".gitignore", "gen/\n")
    write(root, "gen/out.txt", "built between the processes")
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, watch=LocalTarget(root) if watched else False)
    await record.refresh()
    write(root, "src.txt", "the command's")
    write(root, "gen/out.txt", "the command's build")
    write(root, "gen/new.txt", "new")
    os.remove(root / "gen/old.txt")
    assert await files_only(record) == [FileChange("src.txt", b"source")]
    walks = [op for op in spy.ops if type(op).__name__ in ("ScanTree", "ScanPaths")]
    # Watched, the index is loaded before the walk is built; walked, it is
    # read in the walk's own program, and this rare case walks again.
    assert [op.descend for op in walks[: 1 if watched else 2]] == ([("gen",)] if watched else [(), ("gen",)])
    record.close()
    # The next process finds gen/ recorded ignored, and no longer enters it.
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, watch=LocalTarget(root) if watched else False)
    await record.refresh()
    assert [op.descend for op in spy.ops if type(op).__name__ in ("ScanTree", "ScanPaths")] == [()]
    record.close()


async def test_a_damaged_or_foreign_index_is_not_trusted(root):
    write(root, "a.txt", "original")
    first = await record_of(root)
    first.close()
    index = root / ".mevedel/file-state/index"
    data = index.read_bytes()
    for damaged in (data[: len(data) // 2], data[:-1] + bytes([data[-1] ^ 1]), b"not an index"):
        index.write_bytes(damaged)
        spy = Spy(LocalTarget(root))
        record = FileStateRecord(spy)
        await record.refresh()
        assert spy.snapshots() == ["a.txt"]  # read again, as with no index
        record.close()
    # One made under another size limit says nothing about this record's.
    spy = Spy(LocalTarget(root))
    record = FileStateRecord(spy, max_file_bytes=3)
    await record.refresh()
    write(root, "a.txt", "changed")
    assert await record.changes() == [FileChange("a.txt", Entry(Entry.FILE, 0o644, None, 8))]


async def test_a_command_saves_a_delta_and_a_torn_delta_is_ignored(root, monkeypatch):
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    for i in range(10):
        write(root, f"f{i}", f"v1 of {i}")
    await asyncio.sleep(0.1)
    first = await record_of(root)
    whole = (root / ".mevedel/file-state/index").read_bytes()
    write(root, "f1", "v2")
    assert await files_only(first) == [FileChange("f1", b"v1 of 1")]
    await first.refresh()  # the record changes() left is saved in the next program
    # The command's save wrote only what changed, beside the whole index.
    assert (root / ".mevedel/file-state/index").read_bytes() == whole
    delta = root / ".mevedel/file-state/index.delta"
    assert 0 < delta.stat().st_size < len(whole)
    first.close()
    await asyncio.sleep(0.1)

    spy = Spy(LocalTarget(root))
    second = FileStateRecord(spy)
    await second.refresh()
    assert spy.snapshots() == ["f1"]  # read again once (racy at the save), nothing else
    second.close()
    # A torn delta is not applied: the whole index alone is an earlier
    # state, a sound start, and f1 is read again from it.
    data = bytearray(delta.read_bytes())
    data[-1] ^= 1
    delta.write_bytes(bytes(data))
    spy = Spy(LocalTarget(root))
    third = FileStateRecord(spy)
    await third.refresh()
    assert spy.snapshots() == ["f1"]
    write(root, "f1", "v3")
    assert await files_only(third) == [FileChange("f1", b"v2")]


@pytest.mark.parametrize("watched", [False, True], ids=["walked", "watched"])
async def test_what_a_new_process_loads_from_the_index_is_what_its_facts_say(root, monkeypatch, watched):
    # The index keeps, beside the facts, what the record derives from them
    # (entries below each directory, those tracked, the paths the agent
    # wrote in an ignored directory), so a new process need not derive it
    # from every path: after a whole index and a delta of files and
    # directories made and removed, it is what the facts give.
    if watched and not tree_watch.inotify_available():
        pytest.skip("no inotify here")
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    write(root, ".gitignore", "build/\n")
    for i in range(12):
        write(root, f"d{i % 3}/sub{i % 2}/f{i}", f"v{i}")
    write(root, "build/old.o", "ignored")
    await asyncio.sleep(0.1)
    first = FileStateRecord(LocalTarget(root), watch=None if watched else False)
    await first.refresh()
    write(root, "build/out.txt", "the agent's")
    first.remember("build/out.txt")
    os.remove(root / "d0/sub0/f0")
    os.remove(root / "d0/sub0/f6")
    os.rmdir(root / "d0/sub0")
    write(root, "d4/deep/er/new", "made")
    await first.changes()
    await first.refresh()  # the record changes() left, saved as a delta
    first.close()
    assert (root / ".mevedel/file-state/index.delta").exists()

    loaded = FileStateRecord(LocalTarget(root), watch=None if watched else False)
    await loaded.refresh()
    assert loaded._from_index
    kept = (loaded._holding, loaded._tracked, loaded._known)
    derived = FileStateRecord(LocalTarget(root), watch=False)
    derived._load(file_state.RecordState(loaded._table, {}, {}, set(), {}, {}))
    assert kept == (derived._holding, derived._tracked, derived._known)
    assert loaded._known == {"build/out.txt"} and "d0/sub0" not in loaded._holding and loaded._tracked["d4/deep"] == 2
    write(root, "build/out.txt", "a command's")
    write(root, "d1/sub1/f1", "changed")
    assert await files_only(loaded) == [FileChange("build/out.txt", b"the agent's"), FileChange("d1/sub1/f1", b"v1")]
    loaded.close()


async def keep(record) -> None:
    """Keep ``record`` for the next process now (a turn's settlement does)."""
    ops, done = await record.keep_ops()
    if ops:
        done((await record._target.run(ControlProgram(ops))).results)


def lining_up(monkeypatch) -> list:
    """What each walk's diff lined up with the loaded rows from now on
    (None: it looked each path up)."""
    lined_up: list = []
    walk_facts = file_state_table.RecordTable.walk_facts
    monkeypatch.setattr(file_state_table.RecordTable, "walk_facts", lambda table, names: lined_up.append(walk_facts(table, names)) or lined_up[-1])
    return lined_up


def test_a_walk_lines_up_with_the_rows_only_when_it_meets_every_recorded_path_once_in_their_order():
    def facts(n: int) -> bytes:
        return struct.pack(SCAN_FACTS, 0, n, n, n, n, 0o644)

    table = file_state_table.RecordTable(["a", "b/c", "b/d"], [facts(1), facts(2), facts(3)], bytes(96), bytes(3))
    assert table.walk_facts("a\0b/c\0b/d\0") == facts(1) + facts(2) + facts(3)
    assert table.walk_facts("a\0b/d\0b/c\0") is None  # another order
    assert table.walk_facts("a\0b/c\0") is None  # one not met
    assert table.walk_facts("a\0b/c\0b/d\0b/e\0") is None  # one not recorded
    assert table.walk_facts("a\0b/c\0b/c\0b/d\0") is None  # one twice
    # Added since the load: met anywhere, the others in their order.
    table.set("b/a", facts(4), None, None)
    assert table.walk_facts("a\0b/a\0b/c\0b/d\0") == facts(1) + facts(4) + facts(2) + facts(3)
    assert table.walk_facts("a\0b/c\0b/d\0b/a\0") == facts(1) + facts(2) + facts(3) + facts(4)
    assert table.walk_facts("a\0b/a\0b/c\0b/a\0b/d\0") is None
    assert table.walk_facts("a\0b/c\0b/d\0") is None
    table.set("b/c", facts(5), None, None)  # a recorded path's facts changed: it stays where it was
    assert table.walk_facts("b/a\0a\0b/c\0b/d\0") == facts(4) + facts(1) + facts(5) + facts(3)
    table.drop("b/c")
    assert table.walk_facts("a\0b/a\0b/d\0") == facts(1) + facts(4) + facts(3)
    assert table.walk_facts("a\0b/a\0b/c\0b/d\0") is None  # no longer recorded


@pytest.mark.skipif(not tree_watch.inotify_available(), reason="no inotify here")
async def test_a_new_process_walk_lined_up_with_the_index_misses_no_change(root, monkeypatch):
    # A new process's first walk is compared with the rows it loads as
    # whole strings when it meets the recorded paths in their order (a
    # path the last process added anywhere among them): what changed
    # between the processes under the same names -- a rewrite of the same
    # size with its times restored, a file become a link, a file become an
    # empty directory -- is still its baseline, and a command's change
    # after it reports that state as the one before.
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    for i in range(40):
        write(root, f"d{i % 4}/f{i}.txt", f"content {i}\n")
    await asyncio.sleep(0.1)
    first = await record_of(root)
    write(root, "d1/new.txt", "made by the command\n")
    assert [change.path for change in await first.changes()] == ["d1/new.txt"]
    await keep(first)
    first.close()
    assert (root / STORE.rsplit("/", 1)[0] / "index.delta").exists()
    was = os.stat(root / "d0/f0.txt")
    with open(root / "d0/f0.txt", "r+b") as handle:
        handle.write(b"CONTENT")
    os.utime(root / "d0/f0.txt", ns=(was.st_atime_ns, was.st_mtime_ns))
    os.remove(root / "d2/f2.txt")
    os.symlink("f6.txt", root / "d2/f2.txt")
    os.remove(root / "d3/f3.txt")
    os.mkdir(root / "d3/f3.txt")
    await asyncio.sleep(0.1)

    lined_up = lining_up(monkeypatch)
    second = FileStateRecord(LocalTarget(root), watch=LocalTarget(root))
    await second.refresh()
    assert len(lined_up) == 1 and lined_up[0] is not None
    write(root, "d0/f0.txt", "the command's")
    write(root, "d1/new.txt", "the command's too")
    os.remove(root / "d2/f2.txt")
    os.rmdir(root / "d3/f3.txt")
    changes = await second.changes()
    assert [(c.path, c.before, c.gap) for c in changes] == [
        ("d0/f0.txt", Entry.file(b"CONTENT 0\n", 0o644), None),
        ("d1/new.txt", Entry.file(b"made by the command\n", 0o644), None),
        ("d2/f2.txt", Entry.symlink(b"f6.txt"), None),
        ("d3/f3.txt", Entry.directory(0o755), None),
    ]
    second.close()


async def test_a_whole_index_is_kept_in_the_walks_order(root, monkeypatch):
    # A path added since the load is a row at the end; the whole index
    # keeps the rows in the last walk's order, so the next process's walk
    # lines up with them again.
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    monkeypatch.setattr(file_state, "DELTA_PATHS", 0)
    for i in range(40):
        write(root, f"d{i % 4}/f{i}.txt", f"content {i}\n")
    await asyncio.sleep(0.1)
    (await record_of(root)).close()
    record = await record_of(root, watch=False)
    for i in range(8):
        write(root, f"d{i % 4}/f{i}.txt", f"changed {i}\n")
    write(root, "d0/new.txt", "new\n")
    assert len(await record.changes()) == 9
    assert list(record._table.rows)[-1] == "d0/new.txt"
    await keep(record)
    assert not (root / STORE.rsplit("/", 1)[0] / "index.delta").exists()  # whole
    record.close()
    lined_up = lining_up(monkeypatch)
    again = await record_of(root, watch=False)
    assert len(lined_up) == 1 and lined_up[0] is not None
    assert list(again._table.rows) != list(record._table.rows)
    write(root, "d0/new.txt", "the command's\n")
    assert await files_only(again) == [FileChange("d0/new.txt", b"new\n")]
    again.close()


async def test_a_name_that_is_no_utf8_survives_the_index(root):
    name = os.fsdecode(b"caf\xe9.txt")
    write(root, name, "bytes")
    first = await record_of(root)
    first.close()
    second = await record_of(root)
    os.remove(root / name)
    assert await files_only(second) == [FileChange(name, b"bytes")]


# -- over SSH -------------------------------------------------------------------------------


async def _scenario(target, root) -> list[FileChange]:
    write(root, ".gitignore", "*.log\nbuild/\n")
    write(root, "src/a.py", "v1")
    write(root, "b.txt", "b")
    write(root, "x.log", "log")
    write(root, "build/o", "obj")
    record = FileStateRecord(target)
    await record.refresh()
    write(root, "src/a.py", "v2")
    os.remove(root / "b.txt")
    write(root, "c.txt", "c")
    write(root, "x.log", "log 2")
    write(root, "build/o", "obj 2")
    return await files_only(record)


EXPECTED = [
    FileChange("b.txt", b"b"),
    FileChange("c.txt", None),
    FileChange("src/a.py", b"v1"),
    FileChange("x.log", None, IGNORED_GAP),
]


async def test_both_targets_record_alike(root, open_target):
    assert await _scenario(await open_target(root), root) == EXPECTED


async def test_over_ssh_the_same_changes_are_found(root, fault_server):
    from mevedel_server.targets.ssh import SshTarget

    target = await SshTarget.connect(fault_server.url(root), **fault_server.options())
    try:
        assert await _scenario(target, root) == EXPECTED
    finally:
        await target.close()


async def test_over_ssh_a_new_record_starts_from_the_index(root, fault_server, monkeypatch):
    from mevedel_server.targets.ssh import SshTarget

    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    target = await SshTarget.connect(fault_server.url(root), **fault_server.options())
    try:
        for i in range(20):
            write(root, f"d/f{i}", f"v{i}")
        await asyncio.sleep(0.1)
        first = FileStateRecord(target)
        await first.refresh()
        write(root, "d/f1", "changed")
        assert await files_only(first) == [FileChange("d/f1", b"v1")]
        await asyncio.sleep(0.1)
        spy = Spy(target)
        second = FileStateRecord(spy)
        await second.refresh()
        assert spy.snapshots() == ["d/f1"]  # the one racy at the last save, no other
        write(root, "d/f2", "changed too")
        os.remove(root / "d/f3")
        assert await files_only(second) == [FileChange("d/f2", b"v2"), FileChange("d/f3", b"v3")]
    finally:
        await target.close()


# -- against an oracle ------------------------------------------------------------------


def _state(root) -> dict[str, bytes | str]:
    """What a command could change: each file's bytes, each link's target."""
    found: dict[str, bytes | str] = {}
    for directory, dirs, files in os.walk(root):
        if os.path.relpath(directory, root).split(os.sep)[0] == ".mevedel":
            continue
        for name in files + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            full = os.path.join(directory, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            # A link is known by its own lstat facts, never by its target
            # text: one replaced by an identical one is a changed link.
            if os.path.islink(full):
                st_ = os.lstat(full)
                found[rel] = ("link", st_.st_ino, st_.st_size, st_.st_mtime_ns, st_.st_ctime_ns, os.fsencode(os.readlink(full)))
            else:
                found[rel] = open(full, "rb").read()
    return found


def _expected(before: dict, after: dict) -> list[FileChange]:
    out = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if isinstance(old, tuple):
            out.append(FileChange(path, Entry.symlink(old[-1])))  # a link: its target, never followed
        else:
            out.append(FileChange(path, old))
    return out


_FILES = st.sampled_from(["a", "b", "d/c", "d/e/f", "g/h"])
_ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), _FILES, st.binary(max_size=6)),
        st.tuples(st.just("overwrite"), _FILES, st.binary(min_size=1, max_size=1)),  # in place, same size
        st.tuples(st.just("remove"), _FILES, st.none()),
        st.tuples(st.just("link"), _FILES, st.sampled_from(["a", "../outside", "nowhere"])),
        st.tuples(st.just("rmtree"), st.sampled_from(["d", "g"]), st.none()),
    ),
    max_size=5,
)


def _apply(root, action) -> None:
    kind, path, data = action
    full = root / path
    if kind == "rmtree":
        if full.is_dir() and not full.is_symlink():
            import shutil

            shutil.rmtree(full)
        return
    for parent in list(full.relative_to(root).parents)[:-1]:
        if (root / parent).is_symlink() or (root / parent).is_file():
            return  # a file or link stands where a directory would
    if full.is_dir() and not full.is_symlink():
        return
    if kind == "remove":
        if full.is_symlink() or full.exists():
            full.unlink()
    elif kind == "link":
        if full.is_symlink() or full.exists():
            full.unlink()
        full.parent.mkdir(parents=True, exist_ok=True)
        full.symlink_to(data)
    elif kind == "overwrite":
        if full.is_file() and not full.is_symlink() and full.stat().st_size >= 1:
            with open(full, "r+b") as handle:
                handle.write(data)
    else:
        if full.is_symlink():
            full.unlink()
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(data)


def _contents_only(changes, root) -> list:
    """Regular files' changes with their earlier bytes (the model here
    knows contents; modes and directories have tests of their own)."""
    out = []
    for change in changes:
        before = change.before
        if (before is not None and before.kind == Entry.DIRECTORY) or (before is None and os.path.isdir(root / change.path)):
            continue
        out.append(FileChange(change.path, before.data, change.gap) if before is not None and before.kind == Entry.FILE else change)
    return out


@settings(max_examples=40)
@given(commands=st.lists(st.tuples(_ACTIONS, _ACTIONS), min_size=1, max_size=4))
def test_every_command_reports_exactly_what_changed(tmp_path_factory, commands):
    """Each command: actions between commands (absorbed by refresh), then
    the command's own actions; changes() must be exactly the difference,
    with the content from just before the command."""
    root = tmp_path_factory.mktemp("oracle") / "ws"
    root.mkdir()
    for path in ("a", "d/c", "g/h"):
        write(root, path, path.encode())

    async def run() -> None:
        # (Files over the limit are known by their facts, like links; their
        # own test covers them.) Two records side by side: one kept current
        # by inotify (a LocalTarget's default), one that walks every time.
        watched = await record_of(root)
        walking = await record_of(root, watch=False, blob_dir=".mevedel/file-state-walked")
        restarted = await record_of(root, watch=False, blob_dir=".mevedel/file-state-restarted")
        restarted.close()
        try:
            assert watched.unwatched is None or not tree_watch.inotify_available()
            for between, command in commands:
                for action in between:
                    _apply(root, action)
                await watched.refresh()
                await walking.refresh()
                # A new process for every command, starting from the index
                # the last one kept.
                restarted = await record_of(root, watch=False, blob_dir=".mevedel/file-state-restarted")
                before = _state(root)
                for action in command:
                    _apply(root, action)
                expected = _expected(before, _state(root))
                assert _contents_only(await watched.changes(), root) == expected
                assert _contents_only(await walking.changes(), root) == expected
                assert _contents_only(await restarted.changes(), root) == expected
                restarted.close()
        finally:
            watched.close()

    asyncio.run(run())


# -- ScanPaths: a whole walk's answer, for the named paths only ------------------------------


async def test_a_path_scan_answers_what_a_whole_walk_does_there_on_both_targets(root, open_target, tmp_path):
    from mevedel_server.targets import ScanPaths

    write(root, ".gitignore", "*.log\nbuild/\n")
    write(root, "src/.gitignore", "!keep.log\n")
    write(root, "src/a.py", "a")
    write(root, "src/keep.log", "kept")
    write(root, "src/drop.log", "dropped")
    write(root, "src/deep/b.py", "b")
    write(root, "build/out.o", "o")
    write(root, "other/c.py", "c")
    os.link(root / "other/c.py", tmp_path / "c-elsewhere")
    (root / "src/link").symlink_to(tmp_path)
    os.mkfifo(root / "src/pipe")
    target = await open_target(root)
    options = dict(skip_names=(".git", ".mevedel"), descend=())
    whole = (await target.run(ControlProgram([ScanTree(".", **options)])))[0].value
    every = (await target.run(ControlProgram([ScanPaths(".", paths=("",), **options)])))[0].value
    assert every.entries() == whole.entries() and every.unwalked == whole.unwalked
    assert set(every.directories) == {"", "src", "src/deep", "other"}
    assert every.shared == ("other/c.py",)
    paths = ("src/deep", "src/keep.log", "src/drop.log", "src/link", "src/pipe", "build", "gone", "other/c.py/x")
    some = (await target.run(ControlProgram([ScanPaths(".", paths=paths, **options)])))[0].value
    expected = {path: facts for path, facts in whole.entries().items() if path in paths or path.startswith("src/deep/")}
    assert some.entries() == expected  # flags (ignored, link) as the whole walk's; nothing for a FIFO or what is gone
    assert some.unwalked == (("build", "ignored by .gitignore"),)
    assert some.directories == ("src/deep",)


@pytest.mark.parametrize("watched", [False, True], ids=["walked", "watched"])
async def test_a_record_of_a_working_directory_sees_only_its_tree_and_the_roots_leaves_worktrees_out(root, watched):
    """A Worktree Fork's record is its checkout's: what a command changes
    there is named workspace-relative, with the checkout's own .gitignore;
    what changes beside it is not its change. The root's record leaves the
    checkouts under .worktrees/ to their sessions."""
    checkout = root / ".worktrees" / "wt1"
    checkout.mkdir(parents=True)
    (checkout / "a.txt").write_bytes(b"wt before\n")
    (checkout / ".gitignore").write_text("ignored.log\n")
    (root / "main.txt").write_bytes(b"main before\n")
    (root / ".gitignore").write_text(".worktrees/\n")  # the root's .gitignore does not hide the checkout from its record
    target = LocalTarget(root)
    # Watched through a target rooted at the checkout (a local one), else walked (SSH).
    scanner = LocalTarget(checkout) if watched else None
    worktree = FileStateRecord(target, base=".worktrees/wt1", blob_dir=".mevedel/file-state/worktrees/wt1", scanner=scanner)
    main = FileStateRecord(target, skip=(".worktrees",))
    assert (worktree.unwatched is None) == watched
    await worktree.refresh()
    await main.refresh()
    (checkout / "a.txt").write_bytes(b"wt after\n")
    (checkout / "new.txt").write_bytes(b"new\n")
    (checkout / "ignored.log").write_bytes(b"log\n")
    (root / "main.txt").write_bytes(b"main after\n")
    assert await files_only(worktree) == [
        FileChange(".worktrees/wt1/a.txt", b"wt before\n"),
        FileChange(".worktrees/wt1/ignored.log", None, IGNORED_GAP),
        FileChange(".worktrees/wt1/new.txt", None),
    ]
    assert await files_only(main) == [FileChange("main.txt", b"main before\n")]
    assert (worktree.unwatched is None) == watched  # the watch held
    (checkout / "new.txt").unlink()
    assert await files_only(worktree) == [FileChange(".worktrees/wt1/new.txt", b"new\n")]
    assert not list((root / ".worktrees" / "wt1").glob(".mevedel*"))  # the blobs are kept beside the workspace's
    worktree.close()
    main.close()


async def test_a_small_first_read_of_a_walked_tree_is_kept_by_the_next_walk(root, monkeypatch):
    """Walked (an SSH workspace), a first read that fits in one program is
    not saved in a program of its own: the next walk's program keeps it,
    and the next process starts from it (reading nothing again)."""
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    write(root, "a.txt", "original")
    await asyncio.sleep(0.1)  # not racy
    counted = Programs(LocalTarget(root))
    record = FileStateRecord(counted, watch=False)
    await record.refresh()
    assert counted.programs == 2  # the walk, the snapshot of a.txt; no save of its own
    assert not (root / ".mevedel/file-state/index").exists()
    write(root, "b.txt", "new")
    before = counted.programs
    assert [c.path for c in await record.changes()] == ["b.txt"]
    assert (root / ".mevedel/file-state/index").exists()  # kept by the walk's program
    assert counted.programs - before <= 2  # the walk (with the save), the new file's snapshot
    record.close()
    await asyncio.sleep(0.1)
    spy = Spy(LocalTarget(root))
    again = FileStateRecord(spy, watch=False)
    await again.refresh()
    assert spy.snapshots() in ([], ["b.txt"])  # a.txt is not read again
    again.close()


async def test_a_walked_tree_removes_superseded_packs_in_its_next_walk(root, monkeypatch):
    """Walked (an SSH workspace), the blobs no recorded file names any more
    cost no program of their own: the next walk's program removes them,
    and a new process finds any left behind."""
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    write(root, "a.txt", "v1")
    await asyncio.sleep(0.1)
    spy = Spy(LocalTarget(root))
    programs = Programs(spy)
    record = FileStateRecord(programs, watch=False)
    await record.refresh()
    first_packs = {name for name in stored(root) if name.startswith("pack-")}
    write(root, "a.txt", "v2 with more bytes")
    await asyncio.sleep(0.1)
    assert [c.path for c in await record.changes()] == ["a.txt"]
    await asyncio.sleep(0)
    assert record._pruning is None  # no program of its own
    assert first_packs <= stored(root)  # superseded, not removed yet
    before = programs.programs
    await record.refresh()
    assert programs.programs - before == 1  # the walk, with the removals
    assert not first_packs & stored(root)
    record.close()


@pytest.mark.parametrize("watched", [False, True], ids=["walked", "watched"])
async def test_a_working_directorys_record_looks_at_what_the_agent_wrote_in_its_ignored_directory(root, watched):
    # A Worktree Fork's record: the agent's write is named workspace-relative
    # (as fs/write_text_file names it), the change reported the same way; a
    # write outside the checkout is not this record's to remember.
    checkout = root / ".worktrees" / "wt1"
    checkout.mkdir(parents=True)
    (checkout / ".gitignore").write_text("build/\n")
    target = LocalTarget(root)
    worktree = FileStateRecord(target, base=".worktrees/wt1", blob_dir=".mevedel/file-state/worktrees/wt1",
                               scanner=LocalTarget(checkout) if watched else None)
    await worktree.refresh()
    write(checkout, "build/out.txt", "by the agent")
    write(root, "build/out.txt", "beside the checkout")
    worktree.remember(".worktrees/wt1/build/out.txt")
    worktree.remember("build/out.txt")
    assert await files_only(worktree) == []
    assert worktree._known == {"build/out.txt"}
    write(checkout, "build/out.txt", "by a command")
    assert await files_only(worktree) == [FileChange(".worktrees/wt1/build/out.txt", b"by the agent")]
    worktree.close()
