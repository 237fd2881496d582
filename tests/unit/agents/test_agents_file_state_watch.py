"""The file-state record kept current by inotify on a local workspace: every
kind of change is still found without a walk, and whatever can make events
untrustworthy (a lost queue, a moved directory, no watch left) falls back to
a walk that still finds the change.

Each test watches which programs the record runs: a change the watch path
missed would not be looked at (no walk happens), so the expected change
would be missing from ``changes()``."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from tests.unit.agents.test_agents_file_state import files_only, write

from mevedel_server.agents import file_state
from mevedel_server.agents.file_state import FileChange, FileStateRecord
from mevedel_server.targets import (
    ControlProgram,
    LocalTarget,
    ProgramResult,
    ProgramTarget,
    RootReplacedError,
    ScanPaths,
    ScanTree,
    tree_watch,
)
from mevedel_server.targets.program import Entry
from mevedel_server.targets.tree_watch import TreeWatch, WatchUnavailable

pytestmark = pytest.mark.skipif(tree_watch.unwatchable("/tmp") is not None, reason="no inotify here")

class Spy(ProgramTarget):
    def __init__(self, inner, after=None) -> None:
        self.inner = inner
        self.ops: list = []
        #: Called with each program's operations and result, after it ran.
        self.after = after

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.ops.extend(program.operations)
        result = await self.inner.run(program)
        if self.after is not None:
            self.after(program.operations, result)
        return result

    def walks(self) -> int:
        """Whole walks: a ScanTree, or a ScanPaths of the root."""
        return sum(1 for op in self.ops if type(op) is ScanTree or (isinstance(op, ScanPaths) and "" in op.paths))

    def looked_at(self) -> list[str]:
        return sorted(path for op in self.ops if isinstance(op, ScanPaths) for path in op.paths)


@pytest.fixture
def watched(root, monkeypatch):
    """``(record, spy)`` of a watched record primed on ``root``, once its
    files are out of a short racy window (so that only events make the
    record look; a file changed within the window is looked at once more)."""
    monkeypatch.setattr(file_state, "RACY_NS", 50_000_000)
    made: list[FileStateRecord] = []

    async def make(after=None):
        local = LocalTarget(root)
        spy = Spy(local, after)
        record = FileStateRecord(spy, watch=local)
        made.append(record)
        await asyncio.sleep(0.1)
        await record.refresh()
        await asyncio.sleep(0.1)
        await record.refresh()
        assert record.unwatched is None and record._watch.watched > 0
        spy.ops.clear()
        return record, spy

    yield make
    for record in made:
        record.close()


# -- nothing changed, a few changed ----------------------------------------------------


async def test_nothing_changed_runs_no_program_and_a_change_looks_only_there(root, watched):
    for i in range(30):
        write(root, f"d{i % 3}/f{i}.txt", f"content {i}")
    record, spy = await watched()
    await record.refresh()
    assert await files_only(record) == []
    assert spy.ops == []  # no walk, no program: the queue was empty
    write(root, "d1/f1.txt", "changed")
    assert await files_only(record) == [FileChange("d1/f1.txt", b"content 1")]
    assert spy.walks() == 0 and spy.looked_at() == ["d1/f1.txt"]


# -- every kind of change, without a walk ------------------------------------------------


async def test_create_modify_delete_and_rename_across_directories(root, watched):
    write(root, "a/keep.txt", "keep")
    write(root, "a/moving.txt", "moving")
    write(root, "b/gone.txt", "gone")
    write(root, "b/edit.txt", "edit")
    record, spy = await watched()
    write(root, "a/new.txt", "new")
    write(root, "b/edit.txt", "EDIT")
    os.remove(root / "b/gone.txt")
    os.rename(root / "a/moving.txt", root / "b/moved.txt")
    assert await files_only(record) == [
        FileChange("a/moving.txt", b"moving"),
        FileChange("a/new.txt", None),
        FileChange("b/edit.txt", b"edit"),
        FileChange("b/gone.txt", b"gone"),
        FileChange("b/moved.txt", None),
    ]
    assert spy.walks() == 0


async def test_an_atomic_save_and_a_file_still_open_for_writing_are_found(root, watched):
    write(root, "saved.txt", "one")
    write(root, "log.txt", "start\n")
    record, spy = await watched()
    write(root, ".saved.txt.tmp", "two")
    os.replace(root / ".saved.txt.tmp", root / "saved.txt")  # an editor's save
    handle = open(root / "log.txt", "ab")
    try:
        handle.write(b"more\n")
        handle.flush()  # written, not closed
        assert await files_only(record) == [FileChange("log.txt", b"start\n"), FileChange("saved.txt", b"one")]
    finally:
        handle.close()
    assert spy.walks() == 0


async def test_a_change_with_the_same_size_and_the_times_restored_is_found(root, watched):
    write(root, "f.txt", "AAAA")
    before = os.stat(root / "f.txt")
    record, spy = await watched()
    with open(root / "f.txt", "r+b") as handle:
        handle.write(b"BBBB")
    os.utime(root / "f.txt", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert await files_only(record) == [FileChange("f.txt", b"AAAA")]
    assert spy.walks() == 0


async def test_a_new_directory_created_then_filled_and_one_removed(root, watched):
    write(root, "old/x.txt", "x")
    write(root, "old/deep/y.txt", "y")
    write(root, "top.txt", "t")
    record, spy = await watched()
    (root / "new").mkdir()
    write(root, "new/a.txt", "a")
    write(root, "new/sub/b.txt", "b")
    shutil.rmtree(root / "old")
    assert await files_only(record) == [
        FileChange("new/a.txt", None),
        FileChange("new/sub/b.txt", None),
        FileChange("old/deep/y.txt", b"y"),
        FileChange("old/x.txt", b"x"),
    ]
    assert spy.walks() == 0
    # The new directories are watched now: a change inside is found.
    await asyncio.sleep(0.1)
    await record.refresh()  # the new files, racy, looked at once more
    spy.ops.clear()
    write(root, "new/sub/b.txt", "b2")
    assert await files_only(record) == [FileChange("new/sub/b.txt", b"b")]
    assert spy.walks() == 0 and spy.looked_at() == ["new/sub/b.txt"]


async def test_a_symbolic_link_swapped_in_is_recorded_and_never_followed(root, tmp_path, watched):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    (outside / "dir").mkdir()
    write(root, "plain.txt", "plain")
    write(root, "sub/f.txt", "f")
    record, spy = await watched()
    os.remove(root / "plain.txt")
    (root / "plain.txt").symlink_to(outside / "secret")
    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(outside / "dir")  # a directory replaced by a link to one outside
    mode = os.stat(root).st_mode & 0o7777
    file_mode = os.stat(root / ".." / "outside" / "secret").st_mode & 0o7777
    assert await record.changes() == [
        FileChange("plain.txt", Entry.file(b"plain", file_mode)),
        FileChange("sub", Entry.directory(mode)),  # a directory, replaced by a link
        FileChange("sub/f.txt", Entry.file(b"f", file_mode)),
    ]
    assert spy.walks() == 0
    assert not [op for op in spy.ops if "secret" in op.path]
    # Nothing behind the link is watched: a change there is no change here.
    spy.ops.clear()
    (outside / "dir" / "inner").write_bytes(b"inner")
    assert await files_only(record) == [] and spy.ops == []


async def test_a_change_inside_a_new_directory_before_its_watch_existed_is_found(root, watched):
    # The race between a directory's creation and its watch: right after
    # the scan that listed new/sub -- before the record could watch it -- a
    # file appears there. The directory is scanned again once watched.
    write(root, "keep.txt", "k")
    raced: list[str] = []

    def after(ops, result) -> None:
        for op, outcome in zip(ops, result.results):
            if isinstance(op, ScanPaths) and outcome.ok and "new/sub" in outcome.value.directories and not raced:
                write(root, "new/sub/late.txt", "late")
                raced.append("late")

    record, spy = await watched(after)
    write(root, "new/sub/early.txt", "early")
    found = await files_only(record)
    found += await files_only(record)
    assert raced and found == [FileChange("new/sub/early.txt", None), FileChange("new/sub/late.txt", None)]
    assert spy.walks() == 0


async def test_a_hard_link_written_through_a_name_outside_is_found(root, tmp_path, watched):
    write(root, "shared.txt", "one")
    os.link(root / "shared.txt", tmp_path / "elsewhere.txt")
    record, spy = await watched()
    with open(tmp_path / "elsewhere.txt", "r+b") as handle:
        handle.write(b"two")  # no event in the workspace's directories
    assert await files_only(record) == [FileChange("shared.txt", b"one")]
    assert spy.walks() == 0


async def test_a_gitignore_change_looks_again_below_it(root, watched):
    write(root, ".gitignore", "vendor/\n")
    write(root, "vendor/lib.py", "vendored")
    write(root, "src/a.py", "a")
    write(root, "src/b.py", "b")
    record, spy = await watched()
    write(root, ".gitignore", "")
    os.remove(root / "src/b.py")  # along with it: the root's rules changed, everything is looked at
    from mevedel_server.agents.file_state import IGNORED_GAP

    assert await files_only(record) == [
        FileChange(".gitignore", b"vendor/\n"),
        FileChange("src/b.py", b"b"),
        FileChange("vendor/lib.py", None, IGNORED_GAP),
    ]
    spy.ops.clear()
    write(root, "vendor/lib.py", "changed")  # walked, and so watched, now
    assert await files_only(record) == [FileChange("vendor/lib.py", b"vendored")]
    assert spy.walks() == 0


# -- when events cannot be trusted: a walk, which still finds the change -----------------


async def test_an_overflowing_event_queue_falls_back_to_a_walk(root, watched):
    write(root, "a.txt", "a")
    write(root, "b.txt", "b")
    write(root, "c.txt", "c")
    record, spy = await watched()
    with open("/proc/sys/fs/inotify/max_queued_events") as limit:
        queue = int(limit.read())
    # Attribute changes alternating between two files are never coalesced:
    # more of them than the queue holds overflow it, for real.
    for i in range(queue + 100):
        os.utime(root / ("a.txt" if i % 2 else "b.txt"), ns=(i, i))
    write(root, "c.txt", "C")
    assert await files_only(record) == [FileChange("c.txt", b"c")]
    assert spy.walks() >= 1
    # Watched again after the walk: the next change needs none.
    spy.ops.clear()
    write(root, "a.txt", "A")
    assert await files_only(record) == [FileChange("a.txt", b"a")]
    assert spy.walks() == 0


async def test_a_moved_directory_falls_back_to_a_walk(root, watched):
    write(root, "a/x.txt", "x")
    write(root, "a/in/y.txt", "y")
    record, spy = await watched()
    os.rename(root / "a", root / "b")
    write(root, "b/in/y.txt", "Y")  # under its new name: its old watch names a/
    assert await files_only(record) == [
        FileChange("a/in/y.txt", b"y"),
        FileChange("a/x.txt", b"x"),
        FileChange("b/in/y.txt", None),
        FileChange("b/x.txt", None),
    ]
    assert spy.walks() >= 1
    spy.ops.clear()
    write(root, "b/in/y.txt", "Y2")
    assert await files_only(record) == [FileChange("b/in/y.txt", b"Y")]
    assert spy.walks() == 0


async def test_no_watch_left_means_walking_every_time(root, watched, monkeypatch):
    write(root, "a.txt", "a")
    record, spy = await watched()

    def limit_reached(self, directories) -> int:
        raise WatchUnavailable("the inotify watch limit (fs.inotify.max_user_watches) is reached")

    monkeypatch.setattr(TreeWatch, "watch", limit_reached)
    os.mkdir(root / "new")  # a directory to watch: the limit is met
    write(root, "new/n.txt", "n")
    assert await files_only(record) == [FileChange("new/n.txt", None)]
    assert record.unwatched == "the inotify watch limit (fs.inotify.max_user_watches) is reached"
    spy.ops.clear()
    write(root, "a.txt", "A")
    assert await files_only(record) == [FileChange("a.txt", b"a")]
    assert spy.walks() == 1  # no events any more: the walk, every time


async def test_a_replaced_root_is_refused(root, tmp_path, watched):
    write(root, "a.txt", "a")
    record, _spy = await watched()
    os.rename(root, tmp_path / "elsewhere")
    root.mkdir()
    write(root, "a.txt", "other")
    with pytest.raises(RootReplacedError):
        await files_only(record)


async def test_a_failed_look_keeps_what_the_events_said(root, watched):
    write(root, "a.txt", "a")
    record, spy = await watched()
    failing = {"left": 1}

    async def run(program):
        if failing["left"] and any(isinstance(op, ScanPaths) for op in program.operations):
            failing["left"] -= 1
            from mevedel_server.targets import TargetOperationError

            raise TargetOperationError("x", "the connection dropped")
        return await spy.inner.run(program)

    spy.run = run  # type: ignore[method-assign]
    write(root, "a.txt", "A")
    from mevedel_server.targets import TargetOperationError

    with pytest.raises(TargetOperationError):
        await files_only(record)
    # The drained event is not lost with the failed program.
    assert await files_only(record) == [FileChange("a.txt", b"a")]


async def test_a_remote_filesystem_is_walked(monkeypatch, root):
    monkeypatch.setattr(tree_watch, "LOCAL_FILESYSTEMS", frozenset())
    write(root, "a.txt", "a")
    record = FileStateRecord(LocalTarget(root))
    await record.refresh()
    assert record.unwatched is not None and "filesystem" in record.unwatched
    write(root, "a.txt", "b")
    assert await files_only(record) == [FileChange("a.txt", b"a")]


async def test_a_directory_on_another_filesystem_means_walking(root, monkeypatch):
    # As if new/ were a mount inside the workspace (another device): its
    # changes may come from elsewhere, so the tree is walked every time.
    write(root, "a.txt", "a")
    local = LocalTarget(root)
    record = FileStateRecord(local)
    await record.refresh()
    assert record.unwatched is None
    real_fstat = os.fstat

    def fstat(fd):
        found = real_fstat(fd)
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) == "new":
            return os.stat_result((found.st_mode, found.st_ino, found.st_dev + 1, *tuple(found)[3:]))
        return found

    monkeypatch.setattr(os, "fstat", fstat)
    write(root, "new/n.txt", "n")
    assert await files_only(record) == [FileChange("new/n.txt", None)]
    assert record.unwatched == "'new' is on another filesystem than the workspace root (a mount inside it)"
    write(root, "new/n.txt", "N")
    assert await files_only(record) == [FileChange("new/n.txt", b"n")]
    record.close()
