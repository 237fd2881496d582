"""LocalTarget: plain operations, and fail-closed refusal of symlinks at the
root, at a parent and at the leaf."""

from __future__ import annotations

import os
import stat

import pytest

from mevedel_server.targets import (
    ControlProgram,
    CreateExclusive,
    InvalidTargetPath,
    LocalTarget,
    MakeDirs,
    PathAbsentError,
    PathConflictError,
    Read,
    Status,
    TargetOperationError,
    UnsafePathError,
    Verify,
)


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    r.mkdir()
    return r


@pytest.fixture
def outside(tmp_path):
    o = tmp_path / "outside"
    o.mkdir()
    (o / "secret").write_bytes(b"outside bytes")
    return o


async def test_round_trip_of_every_single_operation(root):
    t = LocalTarget(root)
    await t.make_dirs("a/b/c")
    await t.create_exclusive("a/b/c/f.json", b"one")
    assert await t.read("a/b/c/f.json") == b"one"
    await t.replace_atomic("a/b/c/f.json", b"two")
    assert await t.read("a/b/c/f.json") == b"two"
    assert await t.list_dir("a/b/c") == ["f.json"]
    st = await t.stat("a/b/c/f.json")
    assert (st.kind, st.size) == ("file", 3)
    assert (await t.stat("a")).kind == "directory"
    await t.remove("a/b/c/f.json")
    with pytest.raises(PathAbsentError):
        await t.read("a/b/c/f.json")
    await t.remove("a/b/c")
    assert await t.list_dir("a/b") == []


async def test_exclusive_create_refuses_existing_and_keeps_its_bytes(root):
    t = LocalTarget(root)
    await t.create_exclusive("f", b"first")
    with pytest.raises(PathConflictError):
        await t.create_exclusive("f", b"second")
    assert (root / "f").read_bytes() == b"first"


async def test_writes_leave_no_temporary_files_and_are_owner_only(root):
    t = LocalTarget(root)
    await t.create_exclusive("f", b"x" * 10000)
    await t.replace_atomic("f", b"y")
    await t.replace_atomic("g", b"z")
    assert sorted(os.listdir(root)) == ["f", "g"]
    assert stat.S_IMODE(os.stat(root / "f").st_mode) == 0o600


async def test_make_dirs_reports_conflict_for_an_existing_directory(root):
    t = LocalTarget(root)
    result = await t.run(ControlProgram([MakeDirs("d"), MakeDirs("d")]))
    assert [r.status for r in result] == [Status.OK, Status.CONFLICT]
    await t.make_dirs("d")  # exist_ok by default
    with pytest.raises(PathConflictError):
        await t.make_dirs("d", exist_ok=False)


async def test_remove_refuses_a_non_empty_directory(root):
    t = LocalTarget(root)
    await t.make_dirs("d")
    await t.create_exclusive("d/f", b"")
    with pytest.raises(TargetOperationError, match="not empty"):
        await t.remove("d")
    assert (root / "d" / "f").exists()


async def test_reading_a_fifo_does_not_hang(root):
    os.mkfifo(root / "pipe")
    with pytest.raises(TargetOperationError, match="not a regular file"):
        await LocalTarget(root).read("pipe")


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a//b", "a/./b", "a/..", "x\x00y"])
def test_paths_must_be_plain_relative_paths(bad):
    with pytest.raises(InvalidTargetPath):
        Read(bad)


def test_write_operations_need_an_entry_not_the_root():
    with pytest.raises(InvalidTargetPath):
        CreateExclusive(".", b"")


def test_symlinked_root_fails_closed(tmp_path, outside):
    link = tmp_path / "rootlink"
    link.symlink_to(outside)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        LocalTarget(link)


async def test_root_replaced_after_construction_fails_closed(tmp_path, root, outside):
    t = LocalTarget(root)
    root.rename(tmp_path / "moved")
    root.symlink_to(outside)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        await t.read("secret")
    root.unlink()
    root.mkdir()
    (root / "secret").write_bytes(b"impostor")
    with pytest.raises(UnsafePathError, match="replaced"):
        await t.read("secret")


async def test_symlinked_parent_fails_closed_for_every_operation(root, outside):
    (root / "link").symlink_to(outside)
    t = LocalTarget(root)
    for call in (
        t.read("link/secret"),
        t.create_exclusive("link/new", b"x"),
        t.replace_atomic("link/secret", b"x"),
        t.remove("link/secret"),
        t.list_dir("link"),
        t.stat("link/secret"),
        t.make_dirs("link/sub"),
    ):
        with pytest.raises(UnsafePathError, match="'link' is a symbolic link"):
            await call
    assert sorted(os.listdir(outside)) == ["secret"]
    assert (outside / "secret").read_bytes() == b"outside bytes"


async def test_symlinked_leaf_fails_closed(root, outside):
    (root / "leaf").symlink_to(outside / "secret")
    t = LocalTarget(root)
    for call in (t.read("leaf"), t.replace_atomic("leaf", b"x"), t.stat("leaf"), t.remove("leaf")):
        with pytest.raises(UnsafePathError, match="'leaf' is a symbolic link"):
            await call
    result = await t.run(ControlProgram([Verify("leaf", b"outside bytes")]))
    assert result[0].status is Status.FAILED and result[0].unsafe
    with pytest.raises(PathConflictError):
        await t.create_exclusive("leaf", b"x")
    assert (root / "leaf").is_symlink()
    assert (outside / "secret").read_bytes() == b"outside bytes"


async def test_errors_never_show_the_backing_root(root, outside):
    (root / "link").symlink_to(outside)
    t = LocalTarget(root)
    for call in (t.read("missing/file"), t.read("link/secret")):
        with pytest.raises(Exception) as info:
            await call
        assert str(root) not in str(info.value)
        assert str(outside) not in str(info.value)
