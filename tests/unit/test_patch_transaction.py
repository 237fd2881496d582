"""All-or-nothing writes: a failure in the middle of a multi-file patch
restores what was already replaced and removes what was created."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind
from mevedel_server.resources.patch import ResolvedOperation, apply_file_operations, parse_patch

PATCH = "\n".join(
    [
        "*** Begin Patch",
        "*** Update File: work://a.txt",
        "-a",
        "+A",
        "*** Add File: work://new/dir/b.txt",
        "+b",
        "*** Update File: work://c.txt",
        "-c",
        "+C",
        "*** Delete File: work://d.txt",
        "*** End Patch",
    ]
)


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    for name in "acd":
        (tmp_path / f"{name}.txt").write_text(f"{name}\n")
    (tmp_path / "a.txt").chmod(0o640)
    return tmp_path


def resolved(root: Path, text: str = PATCH) -> list[ResolvedOperation]:
    return [
        ResolvedOperation(op, root / op.target.removeprefix("work://"), None, op.target)
        for op in parse_patch(text).operations
    ]


def state(root: Path) -> dict[str, tuple[bytes, int] | None]:
    return {
        str(path.relative_to(root)): (
            (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) if path.is_file() else None
        )
        for path in sorted(root.rglob("*"))
    }


def failing_on(monkeypatch, name: str, calls: set[int], error: int = errno.ENOSPC) -> list[int]:
    """Make ``os.<name>`` raise on the given 1-based calls; return the call counter."""
    real = getattr(os, name)
    counter = [0]

    def wrapper(*args, **kwargs):
        counter[0] += 1
        if counter[0] in calls:
            raise OSError(error, os.strerror(error), str(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, wrapper)
    return counter


def apply_expecting_failure(root: Path) -> AddressError:
    with pytest.raises(AddressError) as caught:
        apply_file_operations(resolved(root))
    error = caught.value
    assert str(root) not in str(error)
    return error


def test_a_rename_failing_on_the_second_file_restores_the_first_and_removes_created_dirs(tree, monkeypatch):
    before = state(tree)
    failing_on(monkeypatch, "replace", {2})
    error = apply_expecting_failure(tree)
    assert error.kind is ErrorKind.UNAVAILABLE
    assert error.authored == "work://new/dir/b.txt"
    assert error.reason == "could not be written (no space left on device); no file was changed"
    assert state(tree) == before
    assert not (tree / "new").exists()


def test_a_failure_at_the_last_write_undoes_every_earlier_write(tree, monkeypatch):
    before = state(tree)
    failing_on(monkeypatch, "replace", {3})
    error = apply_expecting_failure(tree)
    assert error.authored == "work://c.txt"
    assert state(tree) == before


def test_a_failing_delete_restores_all_the_writes(tree, monkeypatch):
    before = state(tree)
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if Path(path).name == "d.txt":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    error = apply_expecting_failure(tree)
    assert (error.kind, error.authored) == (ErrorKind.UNAVAILABLE, "work://d.txt")
    assert error.reason == "could not be deleted (permission denied); no file was changed"
    assert state(tree) == before


def test_restoring_falls_back_to_rewriting_in_place_when_renames_keep_failing(tree, monkeypatch):
    before = state(tree)
    failing_on(monkeypatch, "replace", set(range(2, 100)))
    error = apply_expecting_failure(tree)
    assert error.reason.endswith("no file was changed")
    assert state(tree) == before


def test_a_file_that_cannot_be_restored_is_named(tree, monkeypatch):
    real_replace, real_open = os.replace, os.open
    broken = [False]

    def replace(*args, **kwargs):
        if Path(args[1]).name == "b.txt":
            broken[0] = True
            raise OSError(errno.EIO, "I/O error", str(args[1]))
        return real_replace(*args, **kwargs)

    def open_(path, *args, **kwargs):
        if broken[0] and Path(path).name.startswith((".a.txt", "a.txt")):
            raise OSError(errno.EIO, "I/O error", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "open", open_)
    error = apply_expecting_failure(tree)
    assert error.authored == "work://new/dir/b.txt"
    assert error.reason == (
        "could not be written (input/output error); restoring work://a.txt also failed, "
        "so they may hold the patch's content"
    )
    assert not (tree / "new").exists()
    assert (tree / "c.txt").read_text() == "c\n"


def test_a_file_changed_by_someone_else_during_the_write_is_a_conflict_and_is_kept(tree, monkeypatch):
    real_replace = os.replace

    def replace(*args, **kwargs):
        if Path(args[1]).name == "a.txt":
            (tree / "c.txt").write_text("edited elsewhere\n")
        return real_replace(*args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    error = apply_expecting_failure(tree)
    assert (error.kind, error.authored) == (ErrorKind.CONFLICT, "work://c.txt")
    assert error.reason == "changed while the patch was being applied; reread and retry; no file was changed"
    assert (tree / "a.txt").read_text() == "a\n"
    assert (tree / "c.txt").read_text() == "edited elsewhere\n"
    assert not (tree / "new").exists()


def test_a_new_file_that_appears_during_the_write_is_not_overwritten(tree, monkeypatch):
    real_replace = os.replace

    def replace(*args, **kwargs):
        if Path(args[1]).name == "a.txt":
            (tree / "new" / "dir").mkdir(parents=True, exist_ok=True)
            (tree / "new" / "dir" / "b.txt").write_text("theirs\n")
        return real_replace(*args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    error = apply_expecting_failure(tree)
    assert (error.kind, error.authored) == (ErrorKind.CONFLICT, "work://new/dir/b.txt")
    assert (tree / "new" / "dir" / "b.txt").read_text() == "theirs\n"
    assert (tree / "a.txt").read_text() == "a\n"


def test_a_failed_move_keeps_the_source_and_removes_the_destination(tmp_path, monkeypatch):
    (tmp_path / "old.md").write_text("keep\n")
    text = "*** Begin Patch\n*** Update File: work://old.md\n*** Move to: work://sub/new.md\n*** End Patch\n"
    (operation,) = parse_patch(text).operations
    move = ResolvedOperation(
        operation, tmp_path / "old.md", tmp_path / "sub/new.md", "work://old.md", "work://sub/new.md"
    )
    failing_on(monkeypatch, "unlink", {1}, errno.EROFS)
    with pytest.raises(AddressError) as caught:
        apply_file_operations([move])
    assert (caught.value.authored, caught.value.reason) == (
        "work://old.md",
        "could not be deleted (read-only file system); no file was changed",
    )
    assert (tmp_path / "old.md").read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.md"]
