"""What only LocalTarget can show: one thread hop per program, and how the
durability barrier flushes (``syncfs``, its fsync fallback, a failed flush),
observed by wrapping the flush calls of this process's executor. The target
contract both targets share is test_target_ssh_contract.py."""

from __future__ import annotations

import errno
import os

import pytest

import mevedel_server.targets.local as local_module
from mevedel_server.targets import (
    Barrier,
    ControlProgram,
    CreateExclusive,
    ListDir,
    LocalTarget,
    MakeDirs,
    Read,
    Replace,
    Stat,
    Status,
    executor,
)


@pytest.fixture
def target(tmp_path):
    return LocalTarget(tmp_path)


async def test_one_thread_hop_per_program(tmp_path, target, monkeypatch):
    hops = []
    real = local_module.PROGRAM_THREADS.run

    def counting(func, argument):
        hops.append(func)
        return real(func, argument)

    monkeypatch.setattr(local_module.PROGRAM_THREADS, "run", counting)
    ops = [MakeDirs("x", optional=True)] + [CreateExclusive(f"x/{i}", b"d") for i in range(20)] + [ListDir("x")]
    result = await target.run(ControlProgram(ops))
    assert result.completed and len(result[-1].value) == 20
    assert len(hops) == 1


class Flushes:
    """Records the inodes fsynced and the filesystems synced, in order;
    ``quiet``: whether the machine has little dirty data waiting."""

    def __init__(self, monkeypatch, *, syncfs: bool, quiet: bool = False) -> None:
        self.events: list[tuple[str, int]] = []
        real_fsync = os.fsync
        real_syncfs = executor.sync_filesystem

        def fsync(fd):
            self.events.append(("fsync", os.fstat(fd).st_ino))
            real_fsync(fd)

        def sync_filesystem(fd):
            synced = real_syncfs(fd)
            if synced:
                self.events.append(("syncfs", os.fstat(fd).st_dev))
            return synced

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(executor, "sync_filesystem", sync_filesystem)
        monkeypatch.setattr(executor, "machine_is_quiet", lambda: quiet)
        if not syncfs:
            monkeypatch.setattr(executor, "_syncfs", None)


def _ino(path) -> int:
    return os.stat(path).st_ino


def _program():
    return ControlProgram(
        [
            MakeDirs("pub", deferred=True),
            CreateExclusive("pub/a", b"a" * 3000, deferred=True),
            Replace("pub/b", b"b", deferred=True),
            Barrier(),
            CreateExclusive("head", b"names pub/a and pub/b"),
        ]
    )


def _many_files_program():
    return ControlProgram(
        [
            MakeDirs("pub", deferred=True),
            *(CreateExclusive(f"pub/{n}", b"x" * 100, deferred=True) for n in range(6)),
            Barrier(),
            CreateExclusive("head", b"names pub/0 to pub/5"),
        ]
    )


@pytest.mark.parametrize(
    ("program", "quiet"),
    [(_many_files_program, False), (_program, True)],
    ids=["many-writes", "few-writes-on-a-quiet-machine"],
)
async def test_a_barrier_is_one_syncfs_instead_of_each_files_fsyncs(tmp_path, target, monkeypatch, program, quiet):
    if executor._libc_syncfs() is None:
        pytest.skip("this libc has no syncfs")
    flushes = Flushes(monkeypatch, syncfs=True, quiet=quiet)
    built = program()
    barrier = len(built.operations) - 2
    result = await target.run(built)
    assert result.completed and result[barrier].value == barrier
    # One flush of the filesystem for every deferred write, then the head's
    # own file and directory fsyncs.
    assert flushes.events[0] == ("syncfs", os.stat(tmp_path).st_dev)
    assert [kind for kind, _ in flushes.events] == ["syncfs", "fsync", "fsync"]
    assert flushes.events[2] == ("fsync", _ino(tmp_path))


@pytest.mark.parametrize("syncfs", [True, False], ids=["busy-machine", "without-syncfs"])
async def test_a_barrier_after_few_writes_fsyncs_every_file_and_directory(tmp_path, target, monkeypatch, syncfs):
    # Few writes while other writers have data waiting (or no syncfs):
    # exactly their files and directories are flushed (at once, so that a
    # journal commits them together), not the whole filesystem (whose
    # other writers' data a syncfs would wait for).
    flushes = Flushes(monkeypatch, syncfs=syncfs, quiet=False)
    result = await target.run(_program())
    assert result.completed and result[3].value == 3
    written = {_ino(tmp_path / "pub" / "a"), _ino(tmp_path / "pub" / "b"), _ino(tmp_path), _ino(tmp_path / "pub")}
    assert {ino for _, ino in flushes.events[:4]} == written
    assert [kind for kind, _ in flushes.events] == ["fsync"] * 6  # then the head: file and directory


async def test_the_fsync_fallback_flushes_early_rather_than_hold_every_descriptor(tmp_path, target, monkeypatch):
    Flushes(monkeypatch, syncfs=False)
    before = len(os.listdir("/proc/self/fd"))
    ops = [MakeDirs("many", deferred=True)] + [CreateExclusive(f"many/{i:03d}", b"x", deferred=True) for i in range(150)]
    result = await target.run(ControlProgram([*ops, Barrier()]))
    assert result.completed
    # What the early flushes covered is durable already; the barrier covers the rest.
    assert 0 < result[-1].value < 151
    assert len(os.listdir(tmp_path / "many")) == 150
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("many", [False, True], ids=["fsync", "syncfs"])
async def test_a_failed_flush_stops_the_program_before_the_commit(tmp_path, target, monkeypatch, many):
    def broken(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    if many and executor._libc_syncfs() is None:
        pytest.skip("this libc has no syncfs")
    monkeypatch.setattr(executor, "sync_filesystem", broken)
    monkeypatch.setattr(executor, "machine_is_quiet", lambda: False)
    if not many:
        monkeypatch.setattr(os, "fsync", broken)
    program = _many_files_program() if many else _program()
    barrier = len(program.operations) - 2
    result = await target.run(program)
    assert [r.status for r in result][barrier:] == [Status.FAILED, Status.SKIPPED]
    assert result.stopped_at == barrier and "Input/output error" in result[barrier].reason
    assert not (tmp_path / "head").exists()


async def test_deferred_writes_no_barrier_follows_leave_no_descriptor_open(tmp_path, target, monkeypatch):
    Flushes(monkeypatch, syncfs=False)
    before = len(os.listdir("/proc/self/fd"))
    result = await target.run(ControlProgram([CreateExclusive(f"f{i}", b"x", deferred=True) for i in range(10)]))
    assert result.completed and len(os.listdir(tmp_path)) == 10
    assert len(os.listdir("/proc/self/fd")) == before


async def test_a_read_only_program_opens_each_directory_once(tmp_path, target, monkeypatch):
    deep = tmp_path / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    for i in range(40):
        (deep / f"f{i}").write_bytes(b"%d" % i)
    opened: list[str] = []
    real_open = os.open

    def counting_open(path, flags, *args, **kwargs):
        opened.append(path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(executor.os, "open", counting_open)
    result = await target.run(ControlProgram([Read(f"a/b/c/d/f{i}") for i in range(40)] + [ListDir("a/b/c/d"), Stat("a/b")]))
    assert result.completed and [r.value for r in result][:40] == [b"%d" % i for i in range(40)]
    # The root and a, b, c, d once each, then the 40 files -- not the whole
    # chain again for every file.
    assert len(opened) == 5 + 40


async def test_a_read_only_program_keeps_refusing_links_and_holds_no_descriptor_after(tmp_path, target):
    for n in range(300):  # more directories than one program keeps open
        (tmp_path / f"d{n}").mkdir()
        (tmp_path / f"d{n}" / "f").write_bytes(b"%d" % n)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_bytes(b"outside")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    before = len(os.listdir("/proc/self/fd"))
    ops = [Read(f"d{n}/f") for n in range(300)] + [Read("elsewhere/f"), Read("link/f", optional=True), Read("d299/f")]
    result = await target.run(ControlProgram(ops))
    assert [r.value for r in result][:300] == [b"%d" % n for n in range(300)]
    assert result[300].value == b"outside"
    assert result[301].status is Status.FAILED and result[301].unsafe and "symbolic link" in result[301].reason
    assert result[302].value == b"299"
    assert len(os.listdir("/proc/self/fd")) == before


async def test_a_file_replaced_in_the_same_second_by_one_of_its_size_stats_differently(tmp_path, target):
    """What an item watch's poll compares: another process's same-size edit
    within the second (same whole-second mtime) must still show."""
    (tmp_path / "doc.md").write_bytes(b"one wrote\n")
    (before,) = await target.run(ControlProgram([Stat("doc.md")]))
    await target.run(ControlProgram([Replace("doc.md", b"two wrote\n")]))
    seconds = before.value.mtime_ns // 1_000_000_000
    os.utime(tmp_path / "doc.md", ns=(seconds * 1_000_000_000, seconds * 1_000_000_000))
    (after,) = await target.run(ControlProgram([Stat("doc.md")]))
    assert (after.value.size, after.value.mtime) == (before.value.size, before.value.mtime)
    assert (after.value.ino, after.value.mtime_ns) != (before.value.ino, before.value.mtime_ns)
