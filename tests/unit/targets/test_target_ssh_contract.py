"""The Target contract, run against LocalTarget and against SshTarget over a
real OpenSSH server on 127.0.0.1 (the same directory seen both ways): plain
operations, exclusive creation, replacement, stop-at-first-failure,
statuses, fail-closed symlinks, the lock, the clock, and bytes that pass
unchanged."""

from __future__ import annotations

import asyncio
import fcntl
import os
import stat
import time

import pytest

from mevedel_server.targets import (
    Barrier,
    Clock,
    ControlProgram,
    CreateExclusive,
    CreateInPlace,
    CreateLinked,
    ListDir,
    MakeDirs,
    PathAbsentError,
    PathConflictError,
    Read,
    Remove,
    Replace,
    Stat,
    Status,
    TargetOperationError,
    UnsafePathError,
    Verify,
    read_target_clock,
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


def _fs_seconds(path) -> int:
    path.write_bytes(b"")
    return os.stat(path).st_mtime_ns // 1_000_000_000


# -- plain operations ----------------------------------------------------------


async def test_round_trip_of_every_single_operation(root, open_target):
    t = await open_target(root)
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


async def test_exclusive_create_refuses_existing_and_keeps_its_bytes(root, open_target):
    t = await open_target(root)
    await t.create_exclusive("f", b"first")
    with pytest.raises(PathConflictError):
        await t.create_exclusive("f", b"second")
    assert (root / "f").read_bytes() == b"first"


async def test_an_in_place_create_makes_only_a_new_file_under_its_name(root, open_target, outside):
    """``CreateInPlace`` writes straight under the name (no temporary
    file is ever made beside it) and, like an exclusive create, refuses any
    name already there: a file, a hard link to a file outside the root,
    a symbolic link -- none is written into or followed."""
    t = await open_target(root)
    (root / "d").mkdir()
    os.link(outside / "secret", root / "d" / "linked")
    (root / "d" / "symlinked").symlink_to(outside / "secret")
    (root / "d" / "kept").write_bytes(b"kept")
    ops = [CreateInPlace("d/new", b"x" * 10000, deferred=True), Barrier()]
    result = await t.run(ControlProgram(ops))
    assert result.completed
    assert (root / "d" / "new").read_bytes() == b"x" * 10000
    assert stat.S_IMODE(os.stat(root / "d" / "new").st_mode) == 0o600
    for name in ("linked", "symlinked", "kept"):
        result = await t.run(ControlProgram([CreateInPlace(f"d/{name}", b"evil", deferred=True), Barrier()]))
        assert result[0].status is Status.CONFLICT, name
    assert (outside / "secret").read_bytes() == b"outside bytes"
    assert (root / "d" / "kept").read_bytes() == b"kept"
    assert sorted(os.listdir(root / "d")) == ["kept", "linked", "new", "symlinked"]


async def test_writes_leave_no_temporary_files_and_are_owner_only(root, open_target):
    t = await open_target(root)
    await t.create_exclusive("f", b"x" * 10000)
    await t.replace_atomic("f", b"y")
    await t.replace_atomic("g", b"z")
    assert sorted(os.listdir(root)) == ["f", "g"]
    assert stat.S_IMODE(os.stat(root / "f").st_mode) == 0o600
    assert (root / "f").read_bytes() == b"y"


async def test_make_dirs_conflict_and_remove_of_a_non_empty_directory(root, open_target):
    t = await open_target(root)
    result = await t.run(ControlProgram([MakeDirs("d"), MakeDirs("d")]))
    assert [r.status for r in result] == [Status.OK, Status.CONFLICT]
    await t.make_dirs("d")
    with pytest.raises(PathConflictError):
        await t.make_dirs("d", exist_ok=False)
    await t.create_exclusive("d/f", b"")
    with pytest.raises(TargetOperationError, match="not empty"):
        await t.remove("d")
    assert (root / "d" / "f").exists()


async def test_a_program_that_removes_a_directory_and_makes_it_again_writes_into_the_new_one(root, open_target):
    (root / "d" / "e").mkdir(parents=True)
    t = await open_target(root)
    result = await t.run(
        ControlProgram(
            [
                Stat("d/e"),
                Remove("d/e"),
                Remove("d"),
                CreateExclusive("d/f", b"lost?", optional=True),
                MakeDirs("d/e"),
                CreateExclusive("d/e/f", b"found"),
                Replace("d/g", b"beside"),
            ]
        )
    )
    assert [r.status for r in result] == [Status.OK] * 3 + [Status.ABSENT] + [Status.OK] * 3
    assert (root / "d" / "e" / "f").read_bytes() == b"found"
    assert sorted(os.listdir(root / "d")) == ["e", "g"]


async def test_deferred_writes_are_whole_and_counted_by_their_barrier(root, open_target):
    (root / "old").write_bytes(b"stale")
    t = await open_target(root)
    ops = [
        MakeDirs("p/q", deferred=True),
        CreateExclusive("p/q/a", b"a" * 5000, deferred=True),
        Replace("p/b", b"b", deferred=True),
        Remove("old", deferred=True),
        Barrier(),
        Barrier(),
        CreateExclusive("head", b"names p/q/a"),
    ]
    result = await t.run(ControlProgram(ops))
    assert result.completed
    # Two directories, two files, one removal: the first barrier flushed
    # all five, the second had nothing left to flush.
    assert [r.value for r in result][4:6] == [5, 0]
    assert (root / "p" / "q" / "a").read_bytes() == b"a" * 5000
    assert (root / "p" / "b").read_bytes() == b"b"
    assert sorted(os.listdir(root)) == ["head", "p"]
    assert sorted(os.listdir(root / "p")) == ["b", "q"]
    assert stat.S_IMODE(os.stat(root / "p" / "q" / "a").st_mode) == 0o600


async def test_a_deferred_conflict_stops_the_program_before_its_barrier(root, open_target):
    (root / "taken").write_bytes(b"first")
    t = await open_target(root)
    result = await t.run(
        ControlProgram([CreateExclusive("taken", b"second", deferred=True), Barrier(), CreateExclusive("head", b"")])
    )
    assert [r.status for r in result] == [Status.CONFLICT, Status.SKIPPED, Status.SKIPPED]
    assert (root / "taken").read_bytes() == b"first" and not (root / "head").exists()


async def test_a_linked_create_links_only_the_same_bytes(root, open_target, outside):
    (root / "pub").mkdir()
    (root / "pub" / "same").write_bytes(b"immutable bytes")
    (root / "pub" / "other").write_bytes(b"different bytes")
    (root / "pub" / "link").symlink_to(outside / "secret")
    t = await open_target(root)
    result = await t.run(
        ControlProgram(
            [
                MakeDirs("child", deferred=True),
                CreateLinked("child/a", b"immutable bytes", "pub/same", deferred=True),
                CreateLinked("child/b", b"immutable bytes", "pub/other", deferred=True),
                CreateLinked("child/c", b"outside bytes", "pub/link", deferred=True),
                CreateLinked("child/d", b"new bytes", "pub/missing", deferred=True),
                Barrier(),
            ]
        )
    )
    assert result.completed and [r.value for r in result][1:5] == [True, False, False, False]
    assert os.stat(root / "child" / "a").st_ino == os.stat(root / "pub" / "same").st_ino
    for name, data in (("a", b"immutable bytes"), ("b", b"immutable bytes"), ("c", b"outside bytes"), ("d", b"new bytes")):
        assert (root / "child" / name).read_bytes() == data and not (root / "child" / name).is_symlink()
    assert os.stat(root / "child" / "b").st_ino != os.stat(root / "pub" / "other").st_ino
    assert (root / "pub" / "other").read_bytes() == b"different bytes" and (root / "pub" / "link").is_symlink()
    assert sorted(os.listdir(root / "child")) == ["a", "b", "c", "d"]
    again = await t.run(ControlProgram([CreateLinked("child/a", b"immutable bytes", "pub/same")]))
    assert again[0].status is Status.CONFLICT


async def test_reading_a_fifo_does_not_hang(root, open_target):
    os.mkfifo(root / "pipe")
    t = await open_target(root)
    with pytest.raises(TargetOperationError, match="not a regular file"):
        await t.read("pipe")


async def test_any_byte_in_names_and_contents_passes_unchanged(root, open_target):
    t = await open_target(root)
    # Not UTF-8, a newline, a NUL-free shell metacharacter soup.
    raw_name = b"caf\xe9 \n$(rm -rf x)'\"`;|&*"
    name = os.fsdecode(raw_name)
    content = bytes(range(256)) * 64 + b"\x00MEVEDEL\x01"
    await t.create_exclusive(name, content)
    assert os.listdir(os.fsencode(root)) == [raw_name]
    assert (root / name).read_bytes() == content
    assert await t.list_dir(".") == [name]
    assert await t.read(name) == content
    result = await t.run(ControlProgram([Verify(name, content), Verify(name, content[:-1], optional=True)]))
    assert [r.status for r in result] == [Status.OK, Status.MISMATCH]
    assert result[1].value == content


async def test_large_payloads_stream_both_ways(root, open_target):
    t = await open_target(root)
    big = os.urandom(3 * 1024 * 1024) * 3  # 9 MiB
    await t.run(ControlProgram([MakeDirs("d", optional=True), CreateExclusive("d/big", big), Replace("d/big2", big)]))
    assert (root / "d" / "big").read_bytes() == big
    result = await t.run(ControlProgram([Read("d/big"), Read("d/big2")]))
    assert result[0].value == big and result[1].value == big


# -- programs ------------------------------------------------------------------


async def test_program_stops_at_the_first_failure_and_skips_the_rest(root, open_target):
    t = await open_target(root)
    result = await t.run(ControlProgram([Read("missing"), CreateExclusive("guarded", b"x"), Replace("other", b"y")]))
    assert [r.status for r in result] == [Status.ABSENT, Status.SKIPPED, Status.SKIPPED]
    assert result.stopped_at == 0 and not result.completed
    assert not (root / "guarded").exists() and not (root / "other").exists()


async def test_every_status_is_reported(root, open_target):
    (root / "present").write_bytes(b"abc")
    (root / "link").symlink_to(root / "present")
    t = await open_target(root)
    result = await t.run(
        ControlProgram(
            [
                Read("present"),
                CreateExclusive("present", b"", optional=True),
                Read("absent", optional=True),
                Verify("present", b"xyz", optional=True),
                Read("link", optional=True),
                Verify("present", None),
                Read("present"),
            ]
        )
    )
    assert [r.status for r in result] == [
        Status.OK,
        Status.CONFLICT,
        Status.ABSENT,
        Status.MISMATCH,
        Status.FAILED,
        Status.MISMATCH,
        Status.SKIPPED,
    ]
    assert result[0].value == b"abc" and result[3].value == b"abc"
    assert result[4].unsafe
    assert result.stopped_at == 5


async def test_verify_guards_the_write_that_follows_it(root, open_target):
    (root / "head").write_bytes(b"v1")
    t = await open_target(root)
    stale = await t.run(ControlProgram([Verify("head", b"v0"), Replace("head", b"v2")]))
    assert [r.status for r in stale] == [Status.MISMATCH, Status.SKIPPED]
    assert (root / "head").read_bytes() == b"v1"
    fresh = await t.run(ControlProgram([Verify("head", b"v1"), Replace("head", b"v2")]))
    assert fresh.completed and (root / "head").read_bytes() == b"v2"
    absent = await t.run(
        ControlProgram([Verify("nope", None), Verify("no/such/dir/file", None), Verify("nope", b"x", optional=True)])
    )
    assert [r.status for r in absent] == [Status.OK, Status.OK, Status.MISMATCH]
    assert absent[2].value is None  # the mismatch carries what was there: nothing


async def test_optional_operations_and_root_entries(root, open_target):
    (root / "d").mkdir()
    t = await open_target(root)
    result = await t.run(
        ControlProgram(
            [MakeDirs("d", optional=True), CreateExclusive("d/f", b"x"), Remove("gone", optional=True), ListDir("d")]
        )
    )
    assert [r.status for r in result] == [Status.CONFLICT, Status.OK, Status.ABSENT, Status.OK]
    assert result[3].value == ("f",) and result.completed
    at_root = await t.run(ControlProgram([Stat("."), ListDir(""), Clock(".")]))
    assert at_root.completed and at_root[0].value.kind == "directory" and at_root[1].value == ("d",)
    assert isinstance(at_root[2].value, int)


# -- fail-closed symlinks --------------------------------------------------------


async def test_symlinked_root_fails_closed(tmp_path, outside, open_target):
    link = tmp_path / "rootlink"
    link.symlink_to(outside)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        await open_target(link)


async def test_missing_root_is_refused(tmp_path, open_target):
    with pytest.raises(PathAbsentError):
        await open_target(tmp_path / "nowhere")


async def test_root_replaced_after_connecting_fails_closed(tmp_path, root, outside, open_target):
    t = await open_target(root)
    root.rename(tmp_path / "moved")
    root.symlink_to(outside)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        await t.read("secret")
    root.unlink()
    root.mkdir()
    (root / "secret").write_bytes(b"impostor")
    with pytest.raises(UnsafePathError, match="replaced"):
        await t.read("secret")


async def test_symlinked_parent_fails_closed_for_every_operation(root, outside, open_target):
    (root / "link").symlink_to(outside)
    t = await open_target(root)
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


async def test_symlinked_leaf_fails_closed(root, outside, open_target):
    (root / "leaf").symlink_to(outside / "secret")
    t = await open_target(root)
    for call in (t.read("leaf"), t.replace_atomic("leaf", b"x"), t.stat("leaf"), t.remove("leaf")):
        with pytest.raises(UnsafePathError, match="'leaf' is a symbolic link"):
            await call
    result = await t.run(ControlProgram([Verify("leaf", b"outside bytes")]))
    assert result[0].status is Status.FAILED and result[0].unsafe
    with pytest.raises(PathConflictError):
        await t.create_exclusive("leaf", b"x")
    assert (root / "leaf").is_symlink()
    assert (outside / "secret").read_bytes() == b"outside bytes"


async def test_errors_never_show_the_backing_root(root, outside, open_target):
    (root / "link").symlink_to(outside)
    t = await open_target(root)
    for call in (t.read("missing/file"), t.read("link/secret"), t.run(ControlProgram([], lock="nolock"))):
        with pytest.raises(Exception) as info:
            await call
        assert str(root) not in str(info.value)
        assert str(outside) not in str(info.value)


# -- the lock ------------------------------------------------------------------


async def test_program_waits_while_another_process_holds_the_lock(root, open_target):
    (root / "lock").mkdir()
    t = await open_target(root)
    fd = os.open(root / "lock", os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        guarded = asyncio.ensure_future(t.run(ControlProgram([CreateExclusive("ran", b"x")], lock="lock")))
        await asyncio.sleep(0.5)
        assert not guarded.done(), "the program did not wait for the lock"
        assert not (root / "ran").exists()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert (await guarded).completed
    assert (root / "ran").read_bytes() == b"x"


async def test_lock_directory_must_exist_and_not_be_a_symlink(root, open_target):
    (root / "real").mkdir()
    (root / "link").symlink_to(root / "real")
    t = await open_target(root)
    with pytest.raises(PathAbsentError):
        await t.run(ControlProgram([CreateExclusive("x", b"")], lock="missing"))
    with pytest.raises(UnsafePathError):
        await t.run(ControlProgram([CreateExclusive("x", b"")], lock="link"))
    assert not (root / "x").exists()


# -- the clock -----------------------------------------------------------------


async def test_clock_reading_lies_between_filesystem_stamps_taken_around_it(root, open_target):
    (root / "d").mkdir()
    t = await open_target(root)
    before = _fs_seconds(root / "before")
    reading = await read_target_clock(t, "d")
    after = _fs_seconds(root / "after")
    assert before <= reading <= after
    assert os.listdir(root / "d") == []  # the probe is gone


async def test_client_wall_clock_does_not_enter_the_reading(root, open_target, monkeypatch):
    t = await open_target(root)
    before = _fs_seconds(root / "before")
    # Hours ahead of the target.
    monkeypatch.setattr(time, "time", lambda: 4_000_000_000.0)
    monkeypatch.setattr(time, "time_ns", lambda: 4_000_000_000 * 10**9)
    reading = await read_target_clock(t)
    monkeypatch.undo()
    after = _fs_seconds(root / "after")
    assert before <= reading <= after < 4_000_000_000


async def test_clock_in_absent_or_symlinked_directory_fails(root, open_target):
    (root / "real").mkdir()
    (root / "link").symlink_to(root / "real")
    t = await open_target(root)
    result = await t.run(ControlProgram([Clock("missing", optional=True), Clock("link", optional=True)]))
    assert result[0].status is Status.ABSENT
    assert result[1].status is Status.FAILED and result[1].unsafe
    assert os.listdir(root / "real") == []
