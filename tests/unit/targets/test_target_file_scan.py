"""ScanTree and SnapshotFile: the executor operations under the file-state
record -- on LocalTarget, through the remote program's wire form, and for
the .gitignore matcher against git itself (``git ls-files --others
--exclude-standard``, the files git does not ignore)."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mevedel_server.targets import (
    CAPTURE_LEFT,
    CAPTURE_NONE,
    CAPTURE_RECORD,
    CAPTURED,
    ControlProgram,
    FileScan,
    InvalidTargetPath,
    LocalTarget,
    MakeDirs,
    ScanTree,
    Snapshot,
    SnapshotFile,
    Status,
    executor,
    remote_program,
)
from mevedel_server.targets.executor import pin_root
from mevedel_server.targets.plain_form import plain_operations, program_result
from mevedel_server.targets.program import SCAN_IGNORED, SCAN_IGNORED_REASON, SCAN_LINK

GIT = shutil.which("git")
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def write(root, path: str, data: bytes = b"x") -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


async def scan(target, op: ScanTree | None = None) -> FileScan:
    [result] = (await target.run(ControlProgram([op or ScanTree(".")]))).results
    assert result.status is Status.OK, result
    return result.value


async def snapshot(target, path: str, max_bytes: int = 1 << 20):
    [result] = (await target.run(ControlProgram([SnapshotFile(path, store="blobs", max_bytes=max_bytes, optional=True)]))).results
    return result


# -- ScanTree -------------------------------------------------------------------


async def test_a_scan_gives_each_file_and_link_its_own_lstat_facts(root, tmp_path):
    write(root, "a.txt", b"hello")
    write(root, "d/e/f.bin", b"12345678")
    (root / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    (root / "dirlink").symlink_to(root / "d")
    entries = (await scan(LocalTarget(root))).entries()
    assert set(entries) == {"a.txt", "d/e/f.bin", "link", "dirlink"}
    for path in ("a.txt", "d/e/f.bin", "link", "dirlink"):
        st = os.lstat(root / path)
        flags = SCAN_LINK if path.endswith("link") else 0
        assert entries[path] == (flags, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode & 0o7777)


async def test_an_unchanged_tree_answers_the_very_same_bytes_and_a_change_does_not(root):
    for i in range(50):
        write(root, f"d{i % 5}/f{i}", b"%d" % i)
    target = LocalTarget(root)
    first, second = await scan(target), await scan(target)
    assert (first.names, first.facts) == (second.names, second.facts)
    with open(root / "d3/f8", "r+b") as handle:
        handle.write(b"9")  # same size, in place: the times move
    third = await scan(target)
    assert third.facts != second.facts
    assert third.entries()["d3/f8"] != second.entries()["d3/f8"]


async def test_fifos_sockets_and_skipped_names_are_left_out_and_nothing_blocks(root):
    import socket

    write(root, "kept")
    os.mkfifo(root / "pipe")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(root / "sock"))
        write(root, ".git/HEAD")
        write(root, "sub/.git/config")
        write(root, ".mevedel/sessions/x")
        write(root, "state/blobs/abc")
        op = ScanTree(".", skip_names=(".git", ".mevedel"), skip_paths=("state",))
        assert set((await scan(LocalTarget(root), op)).entries()) == {"kept"}
    finally:
        server.close()


async def test_a_symlinked_directory_is_recorded_as_a_link_and_never_entered(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"never listed")
    (root / "door").symlink_to(outside)
    entries = (await scan(LocalTarget(root))).entries()
    assert list(entries) == ["door"]
    assert entries["door"][0] == SCAN_LINK


async def test_recently_changed_files_are_racy_and_old_ones_are_not(root):
    write(root, "old")
    write(root, ".gitignore", b"*.log\n")
    time.sleep(0.3)  # the change time cannot be set back: let it age
    write(root, "new")
    write(root, "ignored.log")
    result = await scan(LocalTarget(root), ScanTree(".", racy_ns=200_000_000))
    assert "new" in result.racy and "old" not in result.racy and "ignored.log" not in result.racy
    assert abs(result.started_ns - time.time_ns()) < 60 * 10**9


async def test_past_its_limit_a_scan_says_it_is_truncated(root):
    for i in range(10):
        write(root, f"f{i}")
    assert (await scan(LocalTarget(root), ScanTree(".", limit=5))).truncated
    assert not (await scan(LocalTarget(root), ScanTree(".", limit=10))).truncated


@pytest.mark.skipif(AS_ROOT, reason="root lists every directory")
async def test_a_directory_that_cannot_be_listed_is_unwalked_with_its_reason(root):
    write(root, "locked/inside")
    write(root, "open/file")
    (root / "locked").chmod(0)
    try:
        result = await scan(LocalTarget(root))
    finally:
        (root / "locked").chmod(0o700)
    assert set(result.entries()) == {"open/file"}
    assert [path for path, _ in result.unwalked] == ["locked"]


async def test_ignored_files_are_flagged_and_ignored_directories_not_entered_unless_asked(root):
    write(root, ".gitignore", b"*.log\nbuild/\n")
    write(root, "src/main.py")
    write(root, "src/debug.log")
    write(root, "build/out.o")
    write(root, "build/deep/x.o")
    target = LocalTarget(root)
    result = await scan(target)
    entries = result.entries()
    assert set(entries) == {".gitignore", "src/main.py", "src/debug.log"}
    assert entries["src/debug.log"][0] == SCAN_IGNORED and entries["src/main.py"][0] == 0
    assert result.unwalked == (("build", SCAN_IGNORED_REASON),)
    # A directory the caller tracks is walked anyway, everything in it ignored;
    # below it only the tracked directories are entered.
    result = await scan(target, ScanTree(".", descend=("build",)))
    entries = result.entries()
    assert entries["build/out.o"][0] == SCAN_IGNORED
    assert "build/deep/x.o" not in entries and result.unwalked == (("build/deep", SCAN_IGNORED_REASON),)


async def test_a_symlinked_gitignore_is_not_followed(root, tmp_path):
    (tmp_path / "rules").write_bytes(b"*\n")
    (root / ".gitignore").symlink_to(tmp_path / "rules")
    write(root, "a")
    entries = (await scan(LocalTarget(root))).entries()
    assert entries["a"][0] == 0 and entries[".gitignore"][0] == SCAN_LINK


async def test_a_scan_travels_the_wire_form_unchanged(root):
    write(root, "a", b"1")
    write(root, "ü/ñ \n name", b"22")
    (root / "x.log").write_bytes(b"")
    write(root, ".gitignore", b"*.log\nbuild/\n")
    write(root, "build/o")
    program = ControlProgram([ScanTree(".", skip_names=(".git",), descend=(), racy_ns=10**9)])
    dev, ino = pin_root(str(root))
    answer = remote_program.answer(["program", str(root), dev, ino, None, [list(op) for op in plain_operations(program)]])
    from mevedel_server.targets import wire

    nonce = os.urandom(wire.NONCE_SIZE)
    _, decoded = wire.read_frame(_reader(b"".join(wire.frame_chunks(nonce, answer))))
    remote = program_result(program, decoded[1], decoded[2])[0].value
    local = await scan(LocalTarget(root), program.operations[0])
    assert (remote.names, remote.facts, remote.unwalked) == (local.names, local.facts, local.unwalked)
    assert remote.entries()["ü/ñ \n name"][1] == 2


# -- a capturing scan -------------------------------------------------------------


def capturing(pack: str = "pack-c0ffee", max_bytes: int = 100) -> ScanTree:
    return ScanTree(".", skip_names=("blobs",), directories_too=True, capture_store="blobs", capture_bytes=max_bytes, capture_pack=pack)


def captures(found: FileScan) -> dict[str, tuple[int, bytes, int]]:
    """path -> (status, digest, offset) of a capturing scan's answer."""
    return dict(zip(found.paths(), struct.iter_unpack(CAPTURE_RECORD, found.captures)))


async def wire_scan(root, op: ScanTree) -> FileScan:
    """``op`` run by the remote program, its answer through the wire form."""
    program = ControlProgram([op])
    dev, ino = pin_root(str(root))
    answer = remote_program.answer(["program", str(root), dev, ino, None, [list(item) for item in plain_operations(program)]])
    from mevedel_server.targets import wire

    nonce = os.urandom(wire.NONCE_SIZE)
    _, decoded = wire.read_frame(_reader(b"".join(wire.frame_chunks(nonce, answer))))
    [result] = program_result(program, decoded[1], decoded[2]).results
    assert result.status is Status.OK, result
    return result.value


@pytest.mark.parametrize("through", ["local", "wire"])
async def test_a_capturing_scan_keeps_each_content_once_in_its_pack_and_says_where(root, tmp_path, through):
    write(root, ".gitignore", b"*.log\n")
    write(root, "a.txt", b"same bytes")
    write(root, "d/b.txt", b"same bytes")
    write(root, "d/c.txt", b"other")
    write(root, "empty", b"")
    write(root, "x.log", b"ignored")
    write(root, "big.bin", b"z" * 101)
    (root / "link").symlink_to("a.txt")
    os.mkfifo(root / "fifo")
    (root / "blobs").mkdir()
    op = capturing()
    found = await (scan(LocalTarget(root), op) if through == "local" else wire_scan(root, op))
    taken = captures(found)
    assert set(taken) == {".gitignore", "a.txt", "d", "d/b.txt", "d/c.txt", "empty", "x.log", "big.bin", "link"}
    pack = (root / "blobs" / "pack-c0ffee").read_bytes()
    assert found.pack_bytes == len(pack) == len(b"same bytes") + len(b"other") + len(b"\n".join([b"*.log", b""]))
    for path in (".gitignore", "a.txt", "d/b.txt", "d/c.txt", "empty"):
        data = (root / path).read_bytes()
        status, digest, offset = taken[path]
        assert (status, digest, pack[offset : offset + len(data)]) == (CAPTURED, hashlib.sha256(data).digest(), data)
    assert taken["a.txt"] == taken["d/b.txt"]
    # Facts only: a directory, an ignored file, one over the limit; a link is
    # left to the caller (its target is read by an operation of its own).
    assert {path: taken[path][0] for path in ("d", "x.log", "big.bin", "link")} == {
        "d": CAPTURE_NONE, "x.log": CAPTURE_NONE, "big.bin": CAPTURE_NONE, "link": CAPTURE_LEFT,
    }
    # The facts are the walk's, as a plain scan answers them.
    plain = await scan(LocalTarget(root), ScanTree(".", skip_names=("blobs",), directories_too=True))
    assert (found.names, found.facts, plain.captures) == (plain.names, plain.facts, None)


def test_a_file_that_changed_since_the_walk_saw_it_is_left_to_the_caller(root):
    write(root, "a", b"before")
    seen = os.lstat(root / "a")
    write(root, "a", b"after, longer")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    capture = executor._Capture(100)
    try:
        assert struct.unpack(CAPTURE_RECORD, capture.take(fd, "a", seen))[0] == CAPTURE_LEFT
        assert struct.unpack(CAPTURE_RECORD, capture.take(fd, "a", os.lstat(root / "a")))[0] == CAPTURED
        assert struct.unpack(CAPTURE_RECORD, capture.take(fd, "gone", seen))[0] == CAPTURE_LEFT
    finally:
        os.close(fd)


async def test_a_capture_that_cannot_write_its_pack_reads_nothing_and_the_walk_still_answers(root):
    write(root, "a", b"1")
    found = await scan(LocalTarget(root), capturing())  # no blob store
    assert found.captures is None and found.paths() == ["a"]
    (root / "blobs").mkdir()
    (root / "blobs" / "pack-c0ffee").write_bytes(b"someone else's")
    found = await scan(LocalTarget(root), capturing())  # the pack is new, never appended to
    assert found.captures is None and (root / "blobs" / "pack-c0ffee").read_bytes() == b"someone else's"
    found = await scan(LocalTarget(root), capturing("pack-0b"))
    assert captures(found)["a"][0] == CAPTURED and (root / "blobs" / "pack-0b").read_bytes() == b"1"


def test_a_capturing_scan_names_its_store_and_a_pack():
    with pytest.raises(ValueError):
        ScanTree(".", capture_pack="pack-00")
    with pytest.raises(ValueError):
        ScanTree(".", capture_store="blobs", capture_pack="blobs.bin")
    with pytest.raises(InvalidTargetPath):
        ScanTree(".", capture_store="../blobs", capture_pack="pack-00")
    with pytest.raises(ValueError):
        ScanTree(".", capture_store="blobs", capture_pack="pack-00", capture_bytes=-1)
    assert capturing().writes and not ScanTree(".").writes


def _reader(data: bytes):
    view = memoryview(data)
    position = 0

    def read(size: int) -> bytes:
        nonlocal position
        chunk = bytes(view[position : position + size])
        position += len(chunk)
        return chunk

    return read


async def test_changed_since_names_the_entries_whose_facts_moved(root):
    for i in range(300):
        write(root, f"f{i:03}", b"x")
    target = LocalTarget(root)
    first = await scan(target)
    paths = first.paths()
    assert first.changed_since(first) == []
    for name in ("f000", "f150", "f299"):
        with open(root / name, "ab") as handle:
            handle.write(b"y")
    second = await scan(target)
    assert second.names == first.names
    assert sorted(paths[i] for i in second.changed_since(first)) == ["f000", "f150", "f299"]
    assert second.facts_at(paths.index("f150")) == second.entries()["f150"]
    write(root, "new", b"")
    with pytest.raises(ValueError):
        (await scan(target)).changed_since(first)


def test_a_malformed_scan_answer_is_refused():
    program = ControlProgram([ScanTree(".")])
    with pytest.raises(ValueError):
        program_result(program, [["ok", ["a\0", b"short", [], [], False, 1], None, False]], None)
    with pytest.raises(ValueError):
        program_result(program, [["ok", ["a\0", b"x" * 33, [[1, "r"]], [], False, 1], None, False]], None)


_STARTUP_PROBE = """
import sys, types
preloaded = set(sys.modules)
source = open(sys.argv[1], encoding="utf-8").read()
module = types.ModuleType("mevedel_executor")
sys.modules["mevedel_executor"] = module
exec(compile(source, "<mevedel_executor>", "exec"), module.__dict__)
runner = module.Executor(sys.argv[2], module.pin_root(sys.argv[2]))
heavy = ("re", "hashlib", "_sha256", "_sha2")

def loaded():
    return sorted(name for name in heavy if name in sys.modules and name not in preloaded)

runner.run([("ListDir", ".", False, None), ("Read", "plain/a", False, None), ("Stat", "plain", False, None)])
print(loaded())
runner.run([("ScanTree", "plain", False, [[], [], [], 100, 0])])
print(loaded())
runner.run([("ScanTree", ".", False, [[], [], [], 100, 0])])
print(loaded())
runner.run([("MakeDirs", "blobs", True, None), ("SnapshotFile", "plain/a", False, ["blobs", 100])])
print(loaded())
"""


def test_only_a_scan_or_a_snapshot_loads_what_they_need(root):
    # The remote program starts once per round trip: a program without these
    # operations must load neither re nor a hash module (the guard in
    # test_target_ssh_wire reads import statements; this checks the loads).
    write(root, "plain/a", b"1")
    write(root, "ruled/.gitignore", b"*.log\n")
    out = subprocess.run(
        [sys.executable, "-I", "-c", _STARTUP_PROBE, executor.__file__, str(root)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert out[0] == "[]"  # plain operations
    assert out[1] == "[]"  # a scan that meets no .gitignore
    assert out[2] == "['re']"  # one that does
    assert "hashlib" not in out[3] and ("_sha256" in out[3] or "_sha2" in out[3])


def test_scan_and_snapshot_arguments_are_checked():
    with pytest.raises(ValueError):
        ScanTree(".", limit=-1)
    with pytest.raises(TypeError):
        ScanTree(".", descend=(1,))
    with pytest.raises(InvalidTargetPath):
        SnapshotFile("a", store="", max_bytes=1)
    with pytest.raises(ValueError):
        SnapshotFile("a", store="s", max_bytes=1, deferred=True)
    with pytest.raises(InvalidTargetPath):
        SnapshotFile("../a", store="s", max_bytes=1)


# -- SnapshotFile ---------------------------------------------------------------


async def test_a_snapshot_writes_its_blob_once_per_digest(root):
    write(root, "a", b"same bytes")
    write(root, "b", b"same bytes")
    (root / "blobs").mkdir()
    target = LocalTarget(root)
    digest = hashlib.sha256(b"same bytes").hexdigest()
    first = (await snapshot(target, "a")).value
    st = os.stat(root / "a")
    assert first == Snapshot(digest, 10, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, True)
    assert (await snapshot(target, "b")).value.written is False
    assert os.listdir(root / "blobs") == [digest]
    assert (root / "blobs" / digest).read_bytes() == b"same bytes"


async def test_packed_snapshots_append_to_one_pack_and_read_back_by_slice(root, open_target):
    from mevedel_server.targets import ReadSlice

    write(root, "a", b"first file")
    write(root, "b", b"second")
    write(root, "c", b"first file")
    (root / "blobs").mkdir()
    target = await open_target(root)
    pack = "pack-" + "ab" * 16
    ops = [SnapshotFile(name, store="blobs", max_bytes=100, pack=pack, known=known, optional=True)
           for name, known in (("a", None), ("b", None), ("c", hashlib.sha256(b"first file").hexdigest()))]
    a, b, c = (await target.run(ControlProgram(ops))).results
    assert (a.value.offset, a.value.written, b.value.offset, b.value.written) == (0, True, 10, True)
    # Bytes the caller keeps already are not appended again.
    assert (c.value.digest, c.value.offset, c.value.written) == (a.value.digest, None, False)
    assert os.listdir(root / "blobs") == [pack]
    assert (root / "blobs" / pack).read_bytes() == b"first filesecond"
    got = (await target.run(ControlProgram([ReadSlice(f"blobs/{pack}", offset=10, size=6), ReadSlice(f"blobs/{pack}", offset=14, size=9)]))).results
    assert [r.value for r in got] == [b"second", b"nd"]  # a slice past the end is short, never padded
    (root / "blobs" / "linked").symlink_to(root / "a")
    [linked] = (await target.run(ControlProgram([ReadSlice("blobs/linked", offset=0, size=4, optional=True)]))).results
    assert not linked.ok  # a link is never followed


async def test_a_torn_blob_under_its_name_is_replaced(root):
    write(root, "a", b"the whole content")
    digest = hashlib.sha256(b"the whole content").hexdigest()
    write(root, f"blobs/{digest}", b"the wh")
    assert (await snapshot(LocalTarget(root), "a")).value.written is True
    assert (root / "blobs" / digest).read_bytes() == b"the whole content"


async def test_a_file_over_the_limit_is_not_read(root):
    write(root, "big", b"x" * 101)
    (root / "blobs").mkdir()
    result = (await snapshot(LocalTarget(root), "big", max_bytes=100)).value
    assert (result.digest, result.size, result.written) == (None, 101, False)
    assert os.listdir(root / "blobs") == []


async def test_a_snapshot_refuses_links_fifos_and_reports_absence(root, tmp_path):
    (tmp_path / "secret").write_bytes(b"outside")
    (root / "link").symlink_to(tmp_path / "secret")
    os.mkfifo(root / "pipe")
    (root / "blobs").mkdir()
    target = LocalTarget(root)
    link = await snapshot(target, "link")
    assert link.status is Status.FAILED and link.unsafe
    fifo = await snapshot(target, "pipe")  # returns: O_NONBLOCK, never read
    assert fifo.status is Status.FAILED and "not a regular file" in fifo.reason
    assert (await snapshot(target, "gone")).status is Status.ABSENT
    assert os.listdir(root / "blobs") == []


async def test_a_missing_blob_store_is_not_mistaken_for_a_missing_file(root):
    write(root, "a")
    result = await snapshot(LocalTarget(root), "a")
    assert result.status is Status.FAILED and "blob store" in result.reason
    program = ControlProgram([MakeDirs("blobs", optional=True), SnapshotFile("a", store="blobs", max_bytes=10)])
    assert (await LocalTarget(root).run(program)).completed


# -- the .gitignore matcher against git --------------------------------------------


def _git_unignored(root) -> set[str]:
    """The files (and links) git does not ignore in ``root``, a fresh repository."""
    home = root.parent / "git-home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run([GIT, "init", "-q", str(root)], check=True, env=env)
    out = subprocess.run(
        [GIT, "-C", str(root), "-c", "core.quotepath=false", "ls-files", "-z", "--others", "--exclude-standard"],
        check=True,
        env=env,
        capture_output=True,
    ).stdout
    shutil.rmtree(root / ".git")
    return {os.fsdecode(name) for name in out.split(b"\0") if name}


def _all_files(root) -> set[str]:
    found = set()
    for directory, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            found.add(os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/"))
    return found


async def _check_against_git(root) -> None:
    result = await scan(LocalTarget(root), ScanTree(".", skip_names=(".git",)))
    entries = result.entries()
    kept = {path for path, facts in entries.items() if not facts[0] & SCAN_IGNORED}
    assert kept == _git_unignored(root)
    # Every other file is flagged ignored or below a directory not walked.
    unwalked = [path + "/" for path, _ in result.unwalked]
    for path in _all_files(root) - kept:
        assert path in entries or any(path.startswith(prefix) for prefix in unwalked), path


TREE = [
    "a", "b", "ab", "x.log", "c.txt", "build/o", "build/sub/o.log", "doc/a", "doc/x.log",
    "doc/build/o", "src/a/b/c", "src/build/o", "src/doc/a", "a b", "#hash", "!bang", "q?",
    "deep/er/still/x.log", "deep/er/a", "star*", "[ab]", "trail ", "Upper",
]  # fmt: skip

CASES = {
    "basename": "a\n",
    "extension": "*.log\n",
    "negation": "*.log\n!doc/x.log\n",
    "dir only": "build/\n",
    "anchored": "/a\n/doc/\n",
    "middle slash": "doc/a\nsrc/a/b\n",
    "leading double star": "**/build\n",
    "trailing double star": "src/**\n!src/doc/\n",
    "middle double star": "deep/**/x.log\nsrc/**/c\n",
    "question mark and class": "?b\n[ac].txt\n[!x]*.log\n",
    "posix class": "[[:upper:]]*\n[[:digit:]]\n",
    "escapes": "\\#hash\n\\!bang\nq\\?\nstar\\*\n\\[ab]\n",
    "comments and blanks": "# a\n\n   \na\n",
    "trailing spaces": "trail\\ \nc.txt   \n",
    "crlf": "a\r\nc.txt\r\n",
    "negated parent stays ignored": "build/\n!build/o\n",
    "re-included directory": "doc\n!doc/\n",
    "everything then back": "*\n!*/\n!*.txt\n",
    "space in name": "a b\n",
    "unterminated class": "[ab\nc.txt\n",
    "range": "[a-c]*\n",
}


@pytest.mark.skipif(GIT is None, reason="git not installed")
@pytest.mark.parametrize("rules", list(CASES.values()), ids=list(CASES))
async def test_gitignore_syntax_agrees_with_git(tmp_path, rules):
    root = tmp_path / "repo"
    for path in TREE:
        write(root, path)
    write(root, ".gitignore", rules.encode())
    await _check_against_git(root)


@pytest.mark.skipif(GIT is None, reason="git not installed")
async def test_nested_gitignore_files_take_precedence_as_in_git(tmp_path):
    root = tmp_path / "repo"
    for path in TREE:
        write(root, path)
    write(root, ".gitignore", b"*.log\n/doc/a\nbuild\n")
    write(root, "doc/.gitignore", b"!x.log\n/a\n!build/\n")
    write(root, "deep/.gitignore", b"er/a\n")
    write(root, "deep/er/.gitignore", b"!/x.log\nstill/\n")
    await _check_against_git(root)


_SEGMENTS = st.sampled_from(["a", "b", "ab", "*", "?", "**", "b*", "[ab]", "x.log", "*.log", "build", "doc", "er", "[!a]*"])
_PATTERNS = st.builds(
    lambda negate, lead, parts, trail: ("!" if negate else "") + ("/" if lead else "") + "/".join(parts) + ("/" if trail else ""),
    st.booleans(),
    st.booleans(),
    st.lists(_SEGMENTS, min_size=1, max_size=3),
    st.booleans(),
)
_NAMES = st.sampled_from(["a", "b", "ab", "x.log", "build", "doc", "er"])


@pytest.mark.skipif(GIT is None, reason="git not installed")
@settings(max_examples=60)
@given(
    files=st.lists(st.lists(_NAMES, min_size=1, max_size=4).map("/".join), min_size=1, max_size=12),
    root_rules=st.lists(_PATTERNS, max_size=5),
    nested=st.tuples(st.sampled_from(["a", "build", "doc", "doc/er"]), st.lists(_PATTERNS, max_size=3)),
)
def test_any_gitignore_agrees_with_git(tmp_path_factory, files, root_rules, nested):
    import asyncio

    root = tmp_path_factory.mktemp("prop") / "repo"
    root.mkdir()
    for path in files:
        parts = path.split("/")
        # A name cannot be both a file and a directory: the first one wins.
        if any((root / "/".join(parts[:i])).is_file() for i in range(1, len(parts))) or (root / path).is_dir():
            continue
        write(root, path)
    write(root, ".gitignore", "\n".join(root_rules).encode())
    where, rules = nested
    if (root / where).is_dir():
        write(root, f"{where}/.gitignore", "\n".join(rules).encode())
    asyncio.run(_check_against_git(root))


def test_the_executor_matcher_is_importable_alone():
    # The remote program has only the executor: its matcher needs nothing else.
    rules = executor.gitignore_rules(b"*.log\n!keep.log\nbuild/\n")
    assert executor.gitignore_ignores(rules, "x.log", False)
    assert not executor.gitignore_ignores(rules, "keep.log", False)
    assert executor.gitignore_ignores(rules, "build", True)
    assert not executor.gitignore_ignores(rules, "build", False)
