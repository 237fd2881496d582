"""ListTree and ReadFiles, the resolver's operations, on both targets
(``open_target``): what they list and read, what they leave out (links,
FIFOs, sockets), that a listing resumes where it stopped, that a read is
bounded and never blocks, and that a swapped entry is refused."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from mevedel_server.targets import ControlProgram, ListTree, ReadFiles, Status


def build(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "one.txt").write_text("one\n")
    (root / "a" / "b" / "two.txt").write_text("two\n")
    (root / "z.txt").write_text("z\n")
    (root / "empty").mkdir()
    (root / "outside").mkdir()
    (root / "outside" / "secret.txt").write_text("secret\n")
    os.symlink(root / "outside", root / "a" / "dir-link")
    os.symlink(root / "z.txt", root / "a" / "file-link")
    os.mkfifo(root / "a" / "pipe")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "a" / "sock"))


async def one(target, op):
    return (await target.run(ControlProgram([op])))[0]


async def test_a_listing_holds_directories_and_regular_files_in_preorder(open_target, tmp_path):
    build(tmp_path)
    target = await open_target(tmp_path)
    listing = (await one(target, ListTree(""))).value
    assert listing.records == (
        ("", "a/\0empty/\0outside/\0z.txt"),
        ("a", "b/\0one.txt"),
        ("a/b", "two.txt"),
        ("empty", ""),
        ("outside", "secret.txt"),
    )
    assert listing.pending == ()
    top = (await one(target, ListTree("a", depth=1))).value
    assert top.records == (("", "b/\0one.txt"),) and top.pending == ()


async def test_a_listing_resumes_where_it_stopped(open_target, tmp_path):
    build(tmp_path)
    target = await open_target(tmp_path)
    first = (await one(target, ListTree("", limit=5))).value
    assert [directory for directory, _names in first.records] == ["", "a"]
    assert first.pending == ("a/b", "empty", "outside")  # whole directories, until 5 entries
    rest = (await one(target, ListTree("", resume=first.pending))).value
    assert [directory for directory, _names in rest.records] == ["a/b", "empty", "outside"]
    assert rest.pending == ()


async def test_a_listing_refuses_a_linked_start_and_a_missing_one(open_target, tmp_path):
    build(tmp_path)
    target = await open_target(tmp_path)
    linked = await one(target, ListTree("a/dir-link", optional=True))
    assert linked.status is Status.FAILED and linked.unsafe
    missing = await one(target, ListTree("nowhere", optional=True))
    assert missing.status is Status.ABSENT


async def test_files_are_read_in_one_pass_links_and_special_files_refused(open_target, tmp_path):
    build(tmp_path)
    target = await open_target(tmp_path)
    names = ("one.txt", "b/two.txt", "file-link", "dir-link/secret.txt", "pipe", "sock", "gone.txt", "b")
    reads = (await one(target, ReadFiles("a", names=names))).value
    shown = [(read.status, read.data, read.unsafe) for read in reads]
    assert shown[:2] == [(Status.OK, b"one\n", False), (Status.OK, b"two\n", False)]
    assert shown[2] == (Status.FAILED, None, True)  # a link, even one that stays inside
    assert shown[3] == (Status.FAILED, None, True)  # through a linked directory
    assert shown[4][:2] == (Status.FAILED, None) and reads[4].reason.endswith("is not a regular file")
    assert shown[5][:2] == (Status.FAILED, None) and reads[5].reason.endswith("is not a regular file")
    assert shown[6][:2] == (Status.ABSENT, None)
    assert shown[7][:2] == (Status.FAILED, None)


async def test_a_read_is_bounded_by_size_and_by_budget(open_target, tmp_path):
    (tmp_path / "big.txt").write_bytes(b"x" * 1000)
    for n in range(5):
        (tmp_path / f"f{n}.txt").write_bytes(b"y" * 100)
    target = await open_target(tmp_path)
    (big,) = (await one(target, ReadFiles("", names=("big.txt",), max_bytes=999))).value
    assert (big.status, big.data, big.size) == (Status.OK, None, 1000)
    batch = (await one(target, ReadFiles("", names=tuple(f"f{n}.txt" for n in range(5)), budget=250))).value
    assert [read.data for read in batch] == [b"y" * 100] * 3  # the rest is for another program
    (alone,) = (await one(target, ReadFiles("", names=("big.txt",), budget=0))).value
    assert alone.data == b"x" * 1000  # at least one file is read


@pytest.mark.parametrize("bad", ["", "/abs", "a\0b"])
def test_a_batch_read_names_files_below_its_directory(bad):
    with pytest.raises(ValueError):
        ReadFiles("", names=(bad,))


async def test_a_listing_reads_its_first_files_in_depth_first_order(open_target, tmp_path):
    build(tmp_path)
    target = await open_target(tmp_path)
    listing = (await one(target, ListTree("", read_first=3, read_budget=1 << 20))).value
    # a/b/two.txt, a/one.txt, then outside/secret.txt (empty/ holds nothing);
    # links and special files are never among them.
    assert [(path, read.data) for path, read in listing.files] == [
        ("a/b/two.txt", b"two\n"),
        ("a/one.txt", b"one\n"),
        ("outside/secret.txt", b"secret\n"),
    ]
    budgeted = (await one(target, ListTree("", read_first=3, read_budget=1))).value
    assert [path for path, _read in budgeted.files] == ["a/b/two.txt"]  # at least one
    partial = (await one(target, ListTree("", limit=4, read_first=3))).value
    assert partial.files == ()  # a/ is not listed yet: what comes first is unknown
