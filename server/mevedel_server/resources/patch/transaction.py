"""Writing a patch's files all-or-nothing.

Every new content is already computed in memory. Each write goes to a
temporary file in the destination directory, is flushed to disk, and is then
renamed over the destination, creating missing parent directories. Before a
replacement the destination is checked to still hold what the patch was
computed from (or, for a new file, to still be absent). If any step fails,
every completed step is undone from the in-memory originals, in reverse
order, and the created files and directories are removed.

This protects against failures inside the process (a full disk, a permission
change, a concurrent edit). It keeps no on-disk journal, so a crash between
two renames leaves the renames that happened.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...addresses.model import AddressError, ErrorKind


@dataclass(frozen=True, slots=True)
class Original:
    """What a destination held when the patch was computed."""

    data: bytes
    mode: int
    #: Set when the entry was a symbolic link (then restored as that link).
    link: str | None = None


@dataclass(frozen=True, slots=True)
class Write:
    path: Path
    data: bytes
    display: str
    #: ``None`` creates a new file (which must not exist); otherwise it must still hold this.
    expected: Original | None
    #: Permission bits to give the file; ``None`` leaves the process default.
    mode: int | None = None


@dataclass(frozen=True, slots=True)
class Remove:
    path: Path
    display: str
    expected: Original


Step = Write | Remove


def describe_os_error(error: OSError) -> str:
    """An ``OSError`` in words, without the path its ``str()`` would carry."""
    if error.errno:
        return os.strerror(error.errno).lower()
    return "the storage refused the operation"


def commit(steps: Sequence[Step]) -> None:
    """Perform ``steps`` in order, or none of them.

    Raises ``AddressError`` naming the step's display: ``CONFLICT`` when a
    destination changed since it was read, ``UNAVAILABLE`` when the storage
    refused a write. Either way every earlier step has been undone (or the
    reason says which display could not be restored).
    """
    undo: list[tuple[str, Callable[[], None]]] = []
    touched_dirs: set[Path] = set()
    for step in steps:
        try:
            if isinstance(step, Write):
                _write(step, undo)
            else:
                _remove(step, undo)
            touched_dirs.add(step.path.parent)
        except AddressError as error:
            raise _rolled_back(error, undo) from None
        except OSError as error:
            verb = "written" if isinstance(step, Write) else "deleted"
            failure = AddressError(
                ErrorKind.UNAVAILABLE, step.display, f"could not be {verb} ({describe_os_error(error)})"
            )
            raise _rolled_back(failure, undo) from None
    for directory in touched_dirs:
        _sync_directory(directory)


def _rolled_back(error: AddressError, undo: list[tuple[str, Callable[[], None]]]) -> AddressError:
    failed: list[str] = []
    for display, action in reversed(undo):
        try:
            action()
        except OSError:
            if display not in failed:
                failed.append(display)
    if failed:
        reason = f"{error.reason}; restoring {', '.join(failed)} also failed, so they may hold the patch's content"
    else:
        reason = f"{error.reason}; no file was changed"
    return AddressError(error.kind, error.authored, reason)


def _still_expected(path: Path, expected: Original | None, display: str) -> None:
    changed = AddressError(
        ErrorKind.CONFLICT, display, "changed while the patch was being applied; reread and retry"
    )
    if expected is None:
        if os.path.lexists(path):
            raise AddressError(ErrorKind.CONFLICT, display, "was created while the patch was being applied")
        return
    if expected.link is not None:
        if not path.is_symlink() or os.readlink(path) != expected.link:
            raise changed
        return
    try:
        if path.is_symlink() or path.read_bytes() != expected.data:
            raise changed
    except FileNotFoundError:
        raise AddressError(
            ErrorKind.CONFLICT, display, "was deleted while the patch was being applied; reread and retry"
        ) from None


def _make_parents(directory: Path, display: str, undo: list[tuple[str, Callable[[], None]]]) -> None:
    missing: list[Path] = []
    while not directory.exists():
        if os.path.lexists(directory):
            raise AddressError(ErrorKind.CONFLICT, display, "cannot be created: a parent is a dangling link")
        missing.append(directory)
        directory = directory.parent
    if not directory.is_dir():
        raise AddressError(ErrorKind.CONFLICT, display, "cannot be created: a parent is a file, not a directory")
    for created in reversed(missing):
        os.mkdir(created)
        undo.append((display, lambda created=created: os.rmdir(created)))


def _write_temporary(directory: Path, name: str, data: bytes, mode: int | None) -> Path:
    temporary = directory / f".{name}.{secrets.token_hex(6)}.patch-tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        try:
            if mode is not None:
                os.fchmod(descriptor, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    except BaseException:
        _discard(temporary)
        raise
    return temporary


def _discard(temporary: Path) -> None:
    try:
        os.unlink(temporary)
    except OSError:
        pass


def _place(path: Path, data: bytes, mode: int | None) -> None:
    temporary = _write_temporary(path.parent, path.name, data, mode)
    try:
        os.replace(temporary, path)
    except BaseException:
        _discard(temporary)
        raise


def _write(step: Write, undo: list[tuple[str, Callable[[], None]]]) -> None:
    if step.expected is None:
        _make_parents(step.path.parent, step.display, undo)
    temporary = _write_temporary(step.path.parent, step.path.name, step.data, step.mode)
    try:
        _still_expected(step.path, step.expected, step.display)
        os.replace(temporary, step.path)
    except BaseException:
        _discard(temporary)
        raise
    if step.expected is None:
        undo.append((step.display, lambda: os.unlink(step.path)))
    else:
        original = step.expected
        undo.append((step.display, lambda: _restore(step.path, original)))


def _remove(step: Remove, undo: list[tuple[str, Callable[[], None]]]) -> None:
    _still_expected(step.path, step.expected, step.display)
    os.unlink(step.path)
    original = step.expected
    undo.append((step.display, lambda: _restore(step.path, original)))


def _restore(path: Path, original: Original) -> None:
    if original.link is not None:
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(original.link, path)
        return
    try:
        _place(path, original.data, original.mode)
    except OSError:
        # The rename that failed the patch may fail again; rewrite in place.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, original.mode)
        try:
            os.fchmod(descriptor, original.mode)
            view = memoryview(original.data)
            while view:
                view = view[os.write(descriptor, view) :]
        finally:
            os.close(descriptor)


def _sync_directory(directory: Path) -> None:
    # Durability of the renames; a platform or filesystem without directory
    # fsync still has a consistent result, so failure here is not an error.
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)

