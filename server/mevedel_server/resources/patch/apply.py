"""Applying resolved file operations: compute everything, then write once.

The resolver turns each parsed ``FileOperation`` into a ``ResolvedOperation``
by attaching the backing path it authorized. This module reads the current
files, applies the hunks in memory (the conflict check), and only when every
operation has its new content does it hand the writes to the all-or-nothing
transaction. Messages and results use the authored ``display`` text only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...addresses.model import AddressError, ErrorKind
from .format import FileOperation, OperationKind
from .hunk_match import apply_hunks
from .text_layout import NEW_FILE_LAYOUT, join_text, split_text
from .transaction import Original, Remove, Step, Write, commit, describe_os_error

_SUMMARY_LETTER = {"add": "A", "update": "M", "delete": "D"}


@dataclass(frozen=True, slots=True)
class ResolvedOperation:
    """A parsed operation with the backing paths the resolver authorized."""

    operation: FileOperation
    backing: Path
    move_backing: Path | None
    #: The authored address, used in every message and result.
    display: str
    move_display: str | None = None


@dataclass(frozen=True, slots=True)
class FileChange:
    display: str
    kind: OperationKind
    move_display: str | None
    added: int
    removed: int

    def summary_line(self) -> str:
        if self.move_display is not None:
            return f"R {self.display} -> {self.move_display}"
        return f"{_SUMMARY_LETTER[self.kind]} {self.display}"


@dataclass(frozen=True, slots=True)
class PatchResult:
    changes: tuple[FileChange, ...]

    def summary(self) -> str:
        """One line per file: ``A``dded, ``M``odified, ``D``eleted, ``R``enamed (authored addresses)."""
        return "\n".join(change.summary_line() for change in self.changes)


@dataclass(frozen=True, slots=True)
class _Current:
    """A file as it is now: its bytes for the conflict recheck, its text for hunks."""

    original: Original
    text: str
    #: Where a rewrite lands: the file itself, behind any symbolic link.
    real_path: Path


def apply_file_operations(operations: Sequence[ResolvedOperation]) -> PatchResult:
    """Apply every operation or none; raise ``AddressError`` naming the authored address."""
    _refuse_shared_backing(operations)
    steps: list[Step] = []
    removals: list[Step] = []
    changes: list[FileChange] = []
    for resolved in operations:
        change, writes, removes = _plan(resolved)
        changes.append(change)
        steps.extend(writes)
        removals.extend(removes)
    # Writes first: they are the steps likely to fail, and undoing a write
    # is cheaper than recreating a deleted file.
    commit([*steps, *removals])
    return PatchResult(tuple(changes))


def _refuse_shared_backing(operations: Sequence[ResolvedOperation]) -> None:
    # Two spellings (a readable memory key and its digest, say) can name one
    # file; changing it twice in one transaction has no sensible order.
    seen: dict[str, str] = {}
    for resolved in operations:
        pairs = [(resolved.backing, resolved.display)]
        if resolved.move_backing is not None:
            pairs.append((resolved.move_backing, _move_display(resolved)))
        for path, display in pairs:
            key = os.path.realpath(path)
            if key in seen:
                raise AddressError(
                    ErrorKind.INVALID_PATCH,
                    display,
                    f"names the same file as {seen[key]}; one patch may touch each file once",
                )
            seen[key] = display


def _move_display(resolved: ResolvedOperation) -> str:
    return resolved.move_display or resolved.operation.move_to or resolved.display


def _plan(resolved: ResolvedOperation) -> tuple[FileChange, list[Step], list[Step]]:
    operation = resolved.operation
    display = resolved.display
    if operation.kind == "add":
        if os.path.lexists(resolved.backing):
            raise AddressError(ErrorKind.CONFLICT, display, "already exists; use '*** Update File:' to change it")
        _require_creatable_parent(resolved.backing.parent, display)
        text = join_text(operation.added_lines, [None] * len(operation.added_lines), NEW_FILE_LAYOUT)
        change = FileChange(display, "add", None, len(operation.added_lines), 0)
        return change, [Write(resolved.backing, text.encode("utf-8"), display, None)], []

    current = _read_current(resolved.backing, display)
    if operation.kind == "delete":
        removed = len(split_text(current.text).texts)
        change = FileChange(display, "delete", None, 0, removed)
        return change, [], [Remove(resolved.backing, display, current.original)]

    if operation.kind != "update":
        raise AddressError(ErrorKind.INTERNAL, display, f"unknown patch operation {operation.kind!r}")
    split = split_text(current.text)
    texts, endings = apply_hunks(split, operation.hunks, display)
    data = join_text(texts, endings, split.layout).encode("utf-8")
    mode = current.original.mode
    added = sum(hunk.added for hunk in operation.hunks)
    removed = sum(hunk.removed for hunk in operation.hunks)
    if operation.move_to is None:
        if resolved.move_backing is not None:
            raise AddressError(ErrorKind.INTERNAL, display, "a move destination was resolved for a patch without one")
        change = FileChange(display, "update", None, added, removed)
        original = Original(current.original.data, current.original.mode)
        return change, [Write(current.real_path, data, display, original, mode)], []

    move_display = _move_display(resolved)
    if resolved.move_backing is None:
        raise AddressError(ErrorKind.INTERNAL, move_display, "the move destination was not resolved")
    if os.path.lexists(resolved.move_backing):
        raise AddressError(ErrorKind.CONFLICT, move_display, "already exists; a move may not replace a file")
    _require_creatable_parent(resolved.move_backing.parent, move_display)
    change = FileChange(display, "update", move_display, added, removed)
    write = Write(resolved.move_backing, data, move_display, None, mode)
    return change, [write], [Remove(resolved.backing, display, current.original)]


def _require_creatable_parent(directory: Path, display: str) -> None:
    # The transaction rechecks this while writing; failing here keeps a
    # doomed patch from writing anything at all.
    while not os.path.lexists(directory):
        directory = directory.parent
    if not directory.is_dir():
        raise AddressError(ErrorKind.CONFLICT, display, "cannot be created: a parent is a file, not a directory")


def _read_current(path: Path, display: str) -> _Current:
    try:
        link = os.readlink(path) if path.is_symlink() else None
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise AddressError(ErrorKind.UNREADABLE, display, "is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise AddressError(ErrorKind.UNREADABLE, display, "is not a regular file")
        data = path.read_bytes()
    except FileNotFoundError:
        raise AddressError(
            ErrorKind.MISSING_TARGET, display, "does not exist; use '*** Add File:' to create it"
        ) from None
    except PermissionError:
        raise AddressError(ErrorKind.UNREADABLE, display, "cannot be read: permission denied") from None
    except OSError as error:
        raise AddressError(ErrorKind.UNREADABLE, display, f"cannot be read ({describe_os_error(error)})") from None
    if b"\0" in data:
        raise AddressError(ErrorKind.UNREADABLE, display, "is binary content; ApplyPatch edits text files")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AddressError(ErrorKind.UNREADABLE, display, "is not UTF-8 text; ApplyPatch edits text files") from None
    return _Current(Original(data, stat.S_IMODE(info.st_mode), link), text, Path(os.path.realpath(path)))
