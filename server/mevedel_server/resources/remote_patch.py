"""ApplyPatch of work:// files on a workspace reached over SSH, all or
nothing as locally, through the store's target.

One program reads every file the patch names (and stats the parents a new
file needs); the hunks are applied here, with the local engine and its
messages; a second program then proves with ``Verify`` that every file still
holds the bytes read (or is still absent) before any of its atomic
``Replace`` / ``CreateExclusive`` / ``Remove`` steps, so a file changed
meanwhile refuses the whole patch with nothing written. A write the target
refuses after earlier ones succeeded is undone by a third program that puts
the read bytes back, as the local transaction's rollback does.

Deviations from a local patch: a replaced file gets the executor's mode
(0600) rather than keeping its old one, and a symbolic link among the
targets is refused instead of followed (the executor never follows one).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..addresses import parse_address
from ..addresses.model import Address, AddressError, ErrorKind, Family, Operation
from ..targets import ControlProgram, CreateExclusive, MakeDirs, Read, Remove, Replace, Stat, Status, Target, TargetError, Verify
from ..targets.program import OpResult
from .context import ResolverContext
from .patch import FileOperation, PatchResult
from .patch.apply import FileChange
from .patch.hunk_match import apply_hunks
from .patch.text_layout import NEW_FILE_LAYOUT, join_text, split_text
from .remote_work import SHARED_ROOT, session_root
from .work import no_session


@dataclass(frozen=True, slots=True)
class _Target:
    address: Address
    #: Target-relative path; None when the owner is missing (``deferred``).
    path: str | None
    deferred: AddressError | None = None


def names_remote_files(operations: tuple[FileOperation, ...]) -> bool:
    """Whether a patch touches work:// (which lives on the SSH workspace)."""
    return any(
        parse_address(text).family is Family.WORK
        for op in operations
        for text in (op.target, op.move_to)
        if text is not None
    )


def resolve(text: str, context: ResolverContext) -> _Target:
    address = parse_address(text)
    address.require(Operation.APPLY_PATCH)
    authored = address.authored
    if address.family is not Family.WORK:
        raise AddressError(
            ErrorKind.UNSUPPORTED_OPERATION,
            authored,
            "one patch on an SSH workspace changes only its work:// files; apply this change in a patch of its own",
        )
    if address.scope == "shared":
        return _Target(address, "/".join((SHARED_ROOT, *address.path)))
    if address.scope != "session":
        raise AddressError(
            ErrorKind.UNSUPPORTED_OPERATION, authored, "ApplyPatch needs an explicit file below work:// or work://shared/"
        )
    if address.path[:1] == ("shared",):
        raise AddressError(ErrorKind.INTERNAL, authored, "a session path named shared reached the resolver")
    if context.remote_session is None:
        return _Target(address, None, no_session(authored))
    return _Target(address, "/".join((session_root(context.remote_session), *address.path)))


def _checked(target: _Target) -> str:
    if target.deferred is not None:
        raise target.deferred
    assert target.path is not None
    return target.path


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]


@dataclass(slots=True)
class _Plan:
    changes: list[FileChange]
    guards: list[Verify]
    makes: list[str]
    writes: list[tuple[CreateExclusive | Replace, str, bytes | None]]
    removals: list[tuple[Remove, str, bytes]]


def runner(
    planned: list[tuple[FileOperation, _Target, _Target | None]], target: Target
) -> Callable[[], Awaitable[PatchResult]]:
    async def run() -> PatchResult:
        resolved = [
            (op, first, _checked(first), None if second is None else (second, _checked(second)))
            for op, first, second in planned
        ]
        seen: dict[str, str] = {}
        for _op, first, path, move in resolved:
            for display, where in [(first.address.authored, path)] + ([(move[0].address.authored, move[1])] if move else []):
                if where in seen:
                    raise AddressError(
                        ErrorKind.INVALID_PATCH, display, f"names the same file as {seen[where]}; one patch may touch each file once"
                    )
                seen[where] = display
        first_display = resolved[0][1].address.authored if resolved else "ApplyPatch"
        paths = list(seen)
        parents = sorted({parent for where in paths for parent in _parents(where)})
        probe = [op for where in paths for op in (Stat(where, optional=True), Read(where, optional=True))]
        probe += [Stat(parent, optional=True) for parent in parents]
        found = await _run(target, ControlProgram(probe), first_display)
        files = {where: (found[2 * i], found[2 * i + 1]) for i, where in enumerate(paths)}
        dirs = {parent: found[2 * len(paths) + i] for i, parent in enumerate(parents)}
        plan = _Plan([], [], [], [], [])
        for op, first, path, move in resolved:
            _plan(plan, op, first.address.authored, path, move, files, dirs)
        steps: list = list(plan.guards)
        steps += [MakeDirs(where, optional=True) for where in plan.makes]
        first_write = len(steps)
        steps += [step for step, _d, _o in plan.writes] + [step for step, _d, _o in plan.removals]
        result = await _run(target, ControlProgram(steps), first_display)
        if result.completed:
            return PatchResult(tuple(plan.changes))
        stopped = result.stopped_at
        assert stopped is not None
        if stopped < first_write:
            guard = plan.guards[stopped]
            raise AddressError(ErrorKind.CONFLICT, seen[guard.path], _changed(guard, result[stopped]) + "; no file was changed")
        done = [*plan.writes, *plan.removals][: stopped - first_write]
        step, display, _original = [*plan.writes, *plan.removals][stopped - first_write]
        verb = "deleted" if isinstance(step, Remove) else "written"
        reason = f"could not be {verb} ({_why(result[stopped])})"
        failed = await _undo(target, done, [where for where in plan.makes if dirs[where].status is Status.ABSENT])
        if failed:
            reason += f"; restoring {', '.join(failed)} also failed, so they may hold the patch's content"
        else:
            reason += "; no file was changed"
        raise AddressError(ErrorKind.UNAVAILABLE, display, reason)

    return run


async def _run(target: Target, program: ControlProgram, display: str):
    try:
        return await target.run(program)
    except TargetError as error:
        raise AddressError(ErrorKind.UNAVAILABLE, display, f"the SSH workspace could not be reached ({error.reason})") from None


def _changed(guard: Verify, found: OpResult) -> str:
    if guard.expected is None:
        return "was created while the patch was being applied"
    if found.value is None:
        return "was deleted while the patch was being applied; reread and retry"
    return "changed while the patch was being applied; reread and retry"


def _why(found: OpResult) -> str:
    # The executor's own reason names the target-relative backing path.
    if found.unsafe:
        return "a symbolic link is in the way on the SSH workspace"
    if found.status is Status.CONFLICT:
        return "it was created meanwhile"
    if found.status is Status.ABSENT:
        return "a parent directory is missing"
    return "the SSH workspace refused the write"


async def _undo(target: Target, done: list, made: list[str]) -> list[str]:
    """Put back what the stopped program changed; the displays that could not be restored."""
    steps, displays = [], []
    for step, display, original in reversed(done):
        if isinstance(step, CreateExclusive):
            steps.append(Remove(step.path, optional=True))
        else:
            assert original is not None
            steps.append(Replace(step.path, original, optional=True))
        displays.append(display)
    steps += [Remove(where, optional=True) for where in sorted(made, key=len, reverse=True)]
    if not steps:
        return []
    try:
        result = await target.run(ControlProgram(steps))
    except TargetError:
        return sorted(set(displays))
    return sorted({display for display, outcome in zip(displays, result) if not outcome.ok})


def _plan(plan: _Plan, op: FileOperation, display: str, path: str, move, files, dirs) -> None:
    stat, read = files[path]
    if op.kind == "add":
        if _exists(stat, path, dirs):
            raise AddressError(ErrorKind.CONFLICT, display, "already exists; use '*** Update File:' to change it")
        _creatable(plan, path, display, dirs)
        text = join_text(op.added_lines, [None] * len(op.added_lines), NEW_FILE_LAYOUT)
        plan.changes.append(FileChange(display, "add", None, len(op.added_lines), 0))
        plan.guards.append(Verify(path, None))
        plan.writes.append((CreateExclusive(path, text.encode("utf-8")), display, None))
        return
    data, text = _current(stat, read, display)
    plan.guards.append(Verify(path, data))
    if op.kind == "delete":
        plan.changes.append(FileChange(display, "delete", None, 0, len(split_text(text).texts)))
        plan.removals.append((Remove(path), display, data))
        return
    if op.kind != "update":
        raise AddressError(ErrorKind.INTERNAL, display, f"unknown patch operation {op.kind!r}")
    split = split_text(text)
    texts, endings = apply_hunks(split, op.hunks, display)
    new = join_text(texts, endings, split.layout).encode("utf-8")
    added = sum(hunk.added for hunk in op.hunks)
    removed = sum(hunk.removed for hunk in op.hunks)
    if move is None:
        plan.changes.append(FileChange(display, "update", None, added, removed))
        plan.writes.append((Replace(path, new), display, data))
        return
    destination, where = move
    move_display = destination.address.authored
    if _exists(files[where][0], where, dirs):
        raise AddressError(ErrorKind.CONFLICT, move_display, "already exists; a move may not replace a file")
    _creatable(plan, where, move_display, dirs)
    plan.changes.append(FileChange(display, "update", move_display, added, removed))
    plan.guards.append(Verify(where, None))
    plan.writes.append((CreateExclusive(where, new), move_display, None))
    plan.removals.append((Remove(path), display, data))


def _exists(stat: OpResult, path: str, dirs: dict[str, OpResult]) -> bool:
    """Whether an entry (a symbolic link too) is at ``path``, as ``lexists``."""
    if stat.ok:
        return True
    # Refused as a link: the leaf itself, unless a parent is the link.
    return stat.unsafe and not any(dirs[parent].unsafe for parent in _parents(path))


def _creatable(plan: _Plan, path: str, display: str, dirs: dict[str, OpResult]) -> None:
    """The local rule: the nearest existing ancestor is a directory."""
    for parent in _parents(path):
        found = dirs[parent]
        if found.status is Status.ABSENT:
            continue
        if found.unsafe:
            raise AddressError(ErrorKind.CONFLICT, display, "cannot be created: a parent is a symbolic link on the SSH workspace")
        if not found.ok or found.value.kind != "directory":
            raise AddressError(ErrorKind.CONFLICT, display, "cannot be created: a parent is a file, not a directory")
        break
    parent = path.rpartition("/")[0]
    if parent and parent not in plan.makes:
        plan.makes.append(parent)


def _current(stat: OpResult, read: OpResult, display: str) -> tuple[bytes, str]:
    if stat.status is Status.ABSENT:
        raise AddressError(ErrorKind.MISSING_TARGET, display, "does not exist; use '*** Add File:' to create it")
    if stat.unsafe:
        raise AddressError(ErrorKind.UNAVAILABLE, display, "is a symbolic link; ApplyPatch on an SSH workspace edits plain files only")
    if stat.ok and stat.value.kind == "directory":
        raise AddressError(ErrorKind.UNREADABLE, display, "is a directory, not a file")
    if not stat.ok or stat.value.kind != "file":
        raise AddressError(ErrorKind.UNREADABLE, display, "is not a regular file")
    if not read.ok:
        if "Permission denied" in (read.reason or ""):
            raise AddressError(ErrorKind.UNREADABLE, display, "cannot be read: permission denied")
        raise AddressError(ErrorKind.UNREADABLE, display, "cannot be read (the SSH workspace refused it)")
    data: bytes = read.value
    if b"\0" in data:
        raise AddressError(ErrorKind.UNREADABLE, display, "is binary content; ApplyPatch edits text files")
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError:
        raise AddressError(ErrorKind.UNREADABLE, display, "is not UTF-8 text; ApplyPatch edits text files") from None
