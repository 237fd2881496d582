"""Planning a patch: from the files as they are to the files as they will
be, in memory.

The resolver turns each parsed ``FileOperation`` into a
``ResolvedOperation`` by attaching the target-relative path it authorized.
:func:`plan_patch` takes what the transaction read (:class:`Found`), checks
every precondition (a new file must be absent and creatable, an edited one
a regular UTF-8 text file), applies the hunks (the conflict check) and
returns every file's old and new content. Nothing here touches storage;
messages use the authored ``display`` text; a result line names each file
by its ``name`` (workspace-relative path or canonical address), however
the patch spelled it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ...addresses import AddressError, ErrorKind
from .format import FileOperation, OperationKind
from .hunk_match import apply_hunks
from .text_layout import NEW_FILE_LAYOUT, join_text, split_text

_SUMMARY_LETTER = {"add": "A", "update": "M", "delete": "D"}


@dataclass(frozen=True, slots=True)
class ResolvedOperation:
    """A parsed operation with the target-relative paths the resolver authorized."""

    operation: FileOperation
    path: str
    move_path: str | None
    #: The authored address, used in every message and result.
    display: str
    move_display: str | None = None
    #: The name every result gives the file (its workspace-relative path,
    #: or its canonical address), so that each file has one name whichever
    #: spelling the patch used; the authored text when not given.
    name: str | None = None
    move_name: str | None = None


@dataclass(frozen=True, slots=True)
class FileChange:
    display: str
    kind: OperationKind
    move_display: str | None
    added: int
    removed: int
    #: What the summary calls the file and a move's destination (see
    #: ``ResolvedOperation.name``).
    name: str = ""
    move_name: str | None = None

    def summary_line(self) -> str:
        name = self.name or self.display
        if self.move_display is not None:
            return f"R {name} -> {self.move_name or self.move_display}"
        return f"{_SUMMARY_LETTER[self.kind]} {name}"


@dataclass(frozen=True, slots=True)
class PatchResult:
    changes: tuple[FileChange, ...]

    def summary(self) -> str:
        """One line per file: ``A``dded, ``M``odified, ``D``eleted, ``R``enamed (authored addresses)."""
        return "\n".join(change.summary_line() for change in self.changes)


@dataclass(frozen=True, slots=True)
class Found:
    """One path as the transaction's read found it: its bytes (None:
    absent), or the error reading it as a file would raise."""

    data: bytes | None
    error: Callable[[str], AddressError] | None = None


@dataclass(frozen=True, slots=True)
class FileWrite:
    """One file the patch changes: what it held and what it will hold (None: absent)."""

    path: str
    display: str
    old: bytes | None
    new: bytes | None
    #: A move that changes nothing but the name: the new file is this
    #: path's file, linked (so it keeps its permission bits).
    link_from: str | None = None
    #: An edited move: the path whose permission bits the new file takes
    #: (a script moved and edited stays executable).
    mode_from: str | None = None


@dataclass(slots=True)
class Plan:
    changes: list[FileChange] = field(default_factory=list)
    #: Files written (created or replaced), then files removed.
    writes: list[FileWrite] = field(default_factory=list)
    removals: list[FileWrite] = field(default_factory=list)

    @property
    def files(self) -> list[FileWrite]:
        return [*self.writes, *self.removals]


def move_display(resolved: ResolvedOperation) -> str:
    return resolved.move_display or resolved.operation.move_to or resolved.display


def refuse_shared_paths(operations: Sequence[ResolvedOperation]) -> dict[str, str]:
    """Every path the patch touches with the display naming it; two
    spellings of one file (a readable memory key and its digest, say) are
    refused: changing one file twice in one transaction has no order."""
    seen: dict[str, str] = {}
    for resolved in operations:
        pairs = [(resolved.path, resolved.display)]
        if resolved.move_path is not None:
            pairs.append((resolved.move_path, move_display(resolved)))
        for path, display in pairs:
            if path in seen:
                raise AddressError(
                    ErrorKind.INVALID_PATCH, display, f"names the same file as {seen[path]}; one patch may touch each file once"
                )
            seen[path] = display
    return seen


def plan_patch(
    operations: Sequence[ResolvedOperation],
    found: Callable[[str], Found],
    creatable: Callable[[str, str], None],
) -> Plan:
    """The patch's changes, or the ``AddressError`` of the first operation
    that cannot apply. ``found(path)`` is what the read found there;
    ``creatable(path, display)`` refuses a path whose parent cannot hold a
    new file."""
    plan = Plan()
    for resolved in operations:
        _plan(plan, resolved, found, creatable)
    return plan


def _plan(plan: Plan, resolved: ResolvedOperation, found: Callable[[str], Found], creatable: Callable[[str, str], None]) -> None:
    operation, display, path = resolved.operation, resolved.display, resolved.path
    name = resolved.name or display
    current = found(path)
    if operation.kind == "add":
        _require_absent(current, display, "already exists; use '*** Update File:' to change it")
        creatable(path, display)
        text = join_text(operation.added_lines, [None] * len(operation.added_lines), NEW_FILE_LAYOUT)
        plan.changes.append(FileChange(display, "add", None, len(operation.added_lines), 0, name))
        plan.writes.append(FileWrite(path, display, None, text.encode("utf-8")))
        return
    data, text = _current(current, display)
    if operation.kind == "delete":
        plan.changes.append(FileChange(display, "delete", None, 0, len(split_text(text).texts), name))
        plan.removals.append(FileWrite(path, display, data, None))
        return
    if operation.kind != "update":
        raise AddressError(ErrorKind.INTERNAL, display, f"unknown patch operation {operation.kind!r}")
    split = split_text(text)
    texts, endings = apply_hunks(split, operation.hunks, display)
    new = join_text(texts, endings, split.layout).encode("utf-8")
    added = sum(hunk.added for hunk in operation.hunks)
    removed = sum(hunk.removed for hunk in operation.hunks)
    if operation.move_to is None:
        if resolved.move_path is not None:
            raise AddressError(ErrorKind.INTERNAL, display, "a move destination was resolved for a patch without one")
        plan.changes.append(FileChange(display, "update", None, added, removed, name))
        plan.writes.append(FileWrite(path, display, data, new))
        return
    destination = move_display(resolved)
    if resolved.move_path is None:
        raise AddressError(ErrorKind.INTERNAL, destination, "the move destination was not resolved")
    _require_absent(found(resolved.move_path), destination, "already exists; a move may not replace a file")
    creatable(resolved.move_path, destination)
    plan.changes.append(FileChange(display, "update", destination, added, removed, name, resolved.move_name or destination))
    pure = new == data
    plan.writes.append(FileWrite(resolved.move_path, destination, None, new, path if pure else None, None if pure else path))
    plan.removals.append(FileWrite(path, display, data, None))


def _require_absent(found: Found, display: str, exists: str) -> None:
    """A new file's path must hold nothing (a missing parent is fine; a
    link on the way is refused as such)."""
    if found.data is None and found.error is None:
        return
    if found.error is not None:
        error = found.error(display)
        if error.kind is ErrorKind.MISSING_TARGET:
            return
        if error.kind is ErrorKind.CONTAINMENT:
            raise error
    raise AddressError(ErrorKind.CONFLICT, display, exists)


def _current(found: Found, display: str) -> tuple[bytes, str]:
    if found.error is not None:
        error = found.error(display)
        if error.kind is ErrorKind.MISSING_TARGET:
            raise AddressError(ErrorKind.MISSING_TARGET, display, "does not exist; use '*** Add File:' to create it")
        raise error
    data = found.data
    if data is None:
        raise AddressError(ErrorKind.MISSING_TARGET, display, "does not exist; use '*** Add File:' to create it")
    if b"\0" in data:
        raise AddressError(ErrorKind.UNREADABLE, display, "is binary content; ApplyPatch edits text files")
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError:
        raise AddressError(ErrorKind.UNREADABLE, display, "is not UTF-8 text; ApplyPatch edits text files") from None
