"""An ApplyPatch as one journalled transaction on a target -- the same on
this machine and on an SSH workspace.

1. One program reads every file the patch names (``Stat`` and a bounded
   ``ReadFiles``), stats the directories above them, and lists the
   journal directory: a patch that did not commit there is rolled back
   first (:mod:`.journal`), and the read is taken again.
2. The hunks are applied here, in memory (:func:`.apply.plan_patch`); a
   conflict refuses the patch with nothing written.
3. One program, holding the target's root lock, then: proves with
   ``Verify`` that every file still holds the bytes read (or is still
   absent) -- a file changed meanwhile refuses the whole patch, nothing
   written; writes the journal (old and new bytes, then the marker) and a
   ``Barrier``, so the journal is durable before the first file is
   touched; creates the missing directories (the default mode: 0777 less
   the umask) and writes every file
   (``WriteProject``: a replaced file keeps its permission bits, a new one
   gets 0644) and removes the deleted ones, all deferred behind one more
   ``Barrier``; and removes the marker -- the commit point -- then the
   journal's data.
4. A step the target refuses stops the program; the journal then rolls
   back whatever ran (a third program), and the error names the authored
   address and whether every file was restored. A crash at any point
   leaves either no marker (nothing touched, or everything durably
   written) or a marker the next patch on this target rolls back.

A pure move links the same file under its new name (its bits kept), and
an edited move's destination is written with the bits of the file it moves
(read with the files, so a moved script stays executable); a file restored
after a removal is linked back from its second name (:mod:`.journal`).

Symbolic links are never followed: a link in the way of any file the
patch names refuses it (``containment``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...addresses import AddressError, ErrorKind
from ...targets import (
    Barrier,
    ControlProgram,
    CreateExclusive,
    CreateLinked,
    Entry,
    ListDir,
    MakeDirs,
    OpResult,
    ProgramResult,
    PutEntry,
    ReadEntry,
    ReadFiles,
    Remove,
    Stat,
    Status,
    Target,
    TargetError,
    TargetUnavailable,
    Verify,
    WriteProject,
)
from ..engine.containment import through_link
from ..engine.runners import ROOT_CHANGED, root_refused, run_program
from ..engine.text_source import MAX_FILE_BYTES
from . import journal
from .apply import (
    FileWrite,
    Found,
    PatchResult,
    Plan,
    ResolvedOperation,
    plan_patch,
    refuse_shared_paths,
)

#: Times the journal is recovered before a patch gives up reading.
_RECOVERIES = 3


def _parents(path: str) -> list[str]:
    """Every directory above ``path`` below the target's root, nearest first."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]


class _Read:
    """What the read program found: each path's probe and each parent's."""

    def __init__(self, paths: list[str], parents: list[str], moved: list[str], found: ProgramResult) -> None:
        self.files: dict[str, tuple[OpResult, OpResult]] = {}
        for index, path in enumerate(paths):
            self.files[path] = (found[2 * index], found[2 * index + 1])
        base = 2 * len(paths)
        self.dirs = {parent: found[base + i] for i, parent in enumerate(parents)}
        listed = found[base + len(parents)]
        self.journals = journal.journal_ids(listed.value if listed.ok else ())
        #: The permission bits of each file a move takes away, when read.
        self.modes: dict[str, int] = {}
        for index, path in enumerate(moved):
            entry = found[base + len(parents) + 1 + index]
            if entry.ok and entry.value.kind == Entry.FILE and entry.value.mode is not None:
                self.modes[path] = entry.value.mode

    def found(self, path: str) -> Found:
        stat, read = self.files[path]
        if stat.status is Status.ABSENT or _not_a_directory(stat):
            return Found(None)
        if stat.unsafe or (read.status is not Status.SKIPPED and read.unsafe):
            return Found(None, through_link)
        if not stat.ok:
            return Found(None, _unreadable(stat))
        if stat.value.kind == "directory":
            return Found(None, _fixed(ErrorKind.UNREADABLE, "is a directory, not a file"))
        if stat.value.kind != "file":
            return Found(None, _fixed(ErrorKind.UNREADABLE, "is not a regular file"))
        if not read.ok or not read.value:
            return Found(None, _unreadable(read))
        file_read = read.value[0]
        if not file_read.ok:
            if file_read.status is Status.ABSENT:
                return Found(None)
            if file_read.unsafe:
                return Found(None, through_link)
            return Found(None, _unreadable(file_read))
        if file_read.data is None:
            return Found(None, _fixed(ErrorKind.UNREADABLE, "is larger than the 64 MiB read bound"))
        return Found(file_read.data)

    def creatable(self, path: str, display: str, make: list[str]) -> None:
        """The nearest existing directory above ``path`` must be a real
        directory; the missing ones below it are appended to ``make``."""
        missing = []
        for parent in _parents(path):
            found = self.dirs[parent]
            if found.status is Status.ABSENT or _not_a_directory(found):
                missing.append(parent)
                continue
            if found.unsafe:
                raise through_link(display)
            if found.ok and found.value.kind != "directory":
                raise AddressError(ErrorKind.CONFLICT, display, "cannot be created: a parent is a file, not a directory")
            break
        for directory in reversed(missing):
            if directory not in make:
                make.append(directory)


def _not_a_directory(found: OpResult) -> bool:
    # A file above the path: the path itself is absent.
    return found.status is Status.FAILED and not found.unsafe and (found.reason or "").endswith("is not a directory")


def _fixed(kind: ErrorKind, reason: str):
    return lambda display: AddressError(kind, display, reason)


def _unreadable(found) -> object:
    reason = found.reason or ""
    if "Permission denied" in reason:
        return _fixed(ErrorKind.UNREADABLE, "cannot be read: permission denied")
    return _fixed(ErrorKind.UNREADABLE, "cannot be read (the storage refused it)")


async def _read(target: Target, paths: list[str], parents: list[str], moved: list[str], journal_dir: str, display: str) -> _Read:
    ops: list = []
    for path in paths:
        parent, _, leaf = path.rpartition("/")
        ops.append(Stat(path, optional=True))
        ops.append(ReadFiles(parent, names=(leaf,), max_bytes=MAX_FILE_BYTES, budget=0, optional=True))
    ops += [Stat(parent, optional=True) for parent in parents]
    ops.append(ListDir(journal_dir, optional=True))
    # Last, so a refusal here stops nothing the patch needs: a mode not
    # read only leaves that destination the default bits.
    ops += [ReadEntry(path, max_bytes=0, optional=True) for path in moved]
    found = await run_program(target, ControlProgram(ops), display)
    if any(root_refused(result) for result in found):
        raise AddressError(ErrorKind.CONFLICT, display, ROOT_CHANGED)
    return _Read(paths, parents, moved, found)


async def apply_patch(target: Target, journal_dir: str, operations: Sequence[ResolvedOperation]) -> PatchResult:
    """Apply every operation or none; raise ``AddressError`` naming the authored address."""
    displays = refuse_shared_paths(operations)
    first = operations[0].display if operations else "ApplyPatch"
    paths = list(displays)
    parents = sorted({parent for path in paths for parent in _parents(path)})
    moved = [op.path for op in operations if op.operation.move_to is not None and op.path in displays]
    for _attempt in range(_RECOVERIES + 1):
        read = await _read(target, paths, parents, moved, journal_dir, first)
        if not read.journals:
            break
        # A patch here did not commit (a crash): roll it back first.
        try:
            await journal.recover_pending(target, journal_dir, read.journals)
        except TargetError as error:
            raise AddressError(ErrorKind.UNAVAILABLE, first, f"an earlier patch here could not be rolled back ({error.reason})") from None
    else:
        raise AddressError(ErrorKind.UNAVAILABLE, first, "an earlier patch here could not be rolled back; retry later")
    make: list[str] = []
    plan = plan_patch(operations, read.found, lambda path, display: read.creatable(path, display, make))
    await _commit(target, journal_dir, plan, make, displays, first, read.modes)
    return PatchResult(tuple(plan.changes))


async def _commit(
    target: Target, journal_dir: str, plan: Plan, make: list[str], displays: dict[str, str], first: str, modes: dict[str, int]
) -> None:
    files = plan.files
    ident = journal.new_id()
    # Each removed file keeps a second name in the journal until the commit.
    keeps = {change.path: journal.keep_name(journal_dir, ident, n) for n, change in enumerate(plan.removals)}
    entries = [(f.path, f.old, f.new, keeps[f.path].rpartition("/")[2] if f.path in keeps else None) for f in files]
    marker, data = journal.encode(entries, make)
    marker_path, data_path = journal.marker_name(journal_dir, ident), journal.data_name(journal_dir, ident)
    guards = [Verify(f.path, f.old) for f in files]
    ops: list = list(guards)
    ops += [MakeDirs(journal_dir, optional=True), CreateExclusive(data_path, data, deferred=True)]
    ops += [CreateLinked(keeps[c.path], c.old, deferred=True, source=c.path) for c in plan.removals]  # type: ignore[arg-type]
    ops += [CreateExclusive(marker_path, marker, deferred=True), Barrier()]
    first_write = len(ops)
    # A person's directories: made with the default mode (never owner-only),
    # only where nothing is (a path already there answers "mismatch").
    ops += [PutEntry(directory, None, Entry.directory(None), optional=True, deferred=True) for directory in make]
    steps: list[FileWrite] = []
    for change in plan.writes:
        if change.link_from is not None:  # a pure move: the same file under its new name
            ops.append(CreateLinked(change.path, change.new, deferred=True, source=change.link_from))  # type: ignore[arg-type]
        elif change.mode_from in modes:  # an edited move: the moved file's bits
            ops.append(PutEntry(change.path, None, Entry.file(change.new, modes[change.mode_from]), deferred=True))  # type: ignore[arg-type]
        else:
            ops.append(WriteProject(change.path, change.new, deferred=True))  # type: ignore[arg-type]
        steps.append(change)
    for change in plan.removals:
        ops.append(Remove(change.path, deferred=True))
        steps.append(change)
    ops += [Barrier(), Remove(marker_path)]
    ops += [Remove(keep, optional=True) for keep in keeps.values()]
    ops += [Remove(data_path, optional=True), Remove(journal_dir, optional=True)]
    program = ControlProgram(ops, lock=journal.ROOT_LOCK)
    try:
        result = await target.run(program)
    except TargetError as error:
        # The outcome is unknown: roll back whatever ran, if the target answers.
        reason = error.reason if isinstance(error, TargetUnavailable) else "its owning root changed"
        try:
            await journal.recover_one(target, journal_dir, ident)
        except TargetError:
            raise AddressError(
                ErrorKind.UNAVAILABLE,
                first,
                f"its workspace could not be reached ({reason}); if the patch was partly applied, "
                "the next ApplyPatch here rolls it back",
            ) from None
        raise AddressError(ErrorKind.UNAVAILABLE, first, f"its workspace could not be reached ({reason}); no file was changed") from None
    if result.completed:
        return
    stopped = result.stopped_at
    assert stopped is not None
    if stopped < len(guards):
        guard = guards[stopped]
        if result[stopped].unsafe:  # a link swapped in since the read
            raise AddressError(ErrorKind.CONTAINMENT, displays[guard.path], through_link("").reason + "; no file was changed")
        raise AddressError(ErrorKind.CONFLICT, displays[guard.path], _changed(guard, result[stopped]) + "; no file was changed")
    if stopped < first_write:
        # The journal could not be written: no file was touched.
        await _discard(target, [marker_path, *keeps.values(), data_path, journal_dir])
        raise AddressError(ErrorKind.UNAVAILABLE, first, "could not be written (the patch journal could not be written); no file was changed")
    op = ops[stopped]
    file_index = stopped - first_write - len(make)
    if isinstance(op, (WriteProject, CreateLinked, PutEntry, Remove)) and 0 <= file_index < len(steps):
        display = steps[file_index].display
        verb = "deleted" if isinstance(op, Remove) else "written"
    else:
        display, verb = first, "written"
    reason = f"could not be {verb} ({_why(result[stopped])})"
    try:
        recovered = await journal.recover_one(target, journal_dir, ident)
        failed = recovered.failed
    except TargetError:
        failed = [f.path for f in files]
    if failed:
        names = ", ".join(sorted({displays.get(path, path) for path in failed}))
        reason += f"; restoring {names} also failed, so they may hold the patch's content"
    else:
        reason += "; no file was changed"
    raise AddressError(ErrorKind.UNAVAILABLE, display, reason)


async def _discard(target: Target, paths: list[str]) -> None:
    try:
        await target.run(ControlProgram([Remove(path, optional=True) for path in paths], lock=journal.ROOT_LOCK))
    except TargetError:
        pass  # a data file without a marker is removed by the next patch


def _changed(guard: Verify, found: OpResult) -> str:
    if guard.expected is None:
        return "was created while the patch was being applied"
    if found.value is None:
        return "was deleted while the patch was being applied; reread and retry"
    return "changed while the patch was being applied; reread and retry"


def _why(found: OpResult) -> str:
    # The target's own reason names the backing path; only a plain system
    # error text (no quoted path) is shown as it is.
    if found.unsafe:
        return "a symbolic link is in the way"
    if found.status is Status.CONFLICT:
        return "it was created meanwhile"
    if found.status is Status.ABSENT:
        return "a parent directory is missing"
    reason = found.reason or ""
    if reason and "'" not in reason:
        return reason[:1].lower() + reason[1:]
    return "the storage refused the write"
