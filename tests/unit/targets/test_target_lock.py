"""A program's lock directory serialises it against other processes that
name the same lock (flock on the directory descriptor)."""

from __future__ import annotations

import asyncio
import fcntl
import multiprocessing
import os

import pytest

from mevedel_server.targets import (
    ControlProgram,
    CreateExclusive,
    LocalTarget,
    PathAbsentError,
    Remove,
    Replace,
    Status,
    UnsafePathError,
)

_CTX = multiprocessing.get_context("spawn")


def _run_guarded_write(root: str, started) -> None:
    async def main() -> None:
        target = LocalTarget(root)
        started.set()
        await target.run(ControlProgram([CreateExclusive("ran", b"x")], lock="lock"))

    asyncio.run(main())


def _hammer(root: str, name: str, rounds: int, conflicts) -> None:
    async def main() -> None:
        target = LocalTarget(root)
        payload = os.urandom(64 * 1024)
        for _ in range(rounds):
            result = await target.run(
                ControlProgram(
                    [CreateExclusive("inside", name.encode()), Replace(f"scratch-{name}", payload), Remove("inside")],
                    lock="lock",
                )
            )
            if result[0].status is not Status.OK:
                with conflicts.get_lock():
                    conflicts.value += 1

    asyncio.run(main())


def test_program_waits_while_another_process_holds_the_lock(tmp_path):
    (tmp_path / "lock").mkdir()
    fd = os.open(tmp_path / "lock", os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    started = _CTX.Event()
    child = _CTX.Process(target=_run_guarded_write, args=(str(tmp_path), started))
    child.start()
    try:
        assert started.wait(30)
        child.join(0.5)
        assert child.is_alive(), "the program did not wait for the lock"
        assert not (tmp_path / "ran").exists()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    child.join(30)
    assert child.exitcode == 0
    assert (tmp_path / "ran").read_bytes() == b"x"


def test_two_processes_never_interleave_inside_the_lock(tmp_path):
    (tmp_path / "lock").mkdir()
    conflicts = _CTX.Value("i", 0)
    workers = [_CTX.Process(target=_hammer, args=(str(tmp_path), n, 60, conflicts)) for n in ("a", "b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    assert conflicts.value == 0
    assert not (tmp_path / "inside").exists()


async def test_lock_directory_must_exist_and_not_be_a_symlink(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    target = LocalTarget(tmp_path)
    with pytest.raises(PathAbsentError):
        await target.run(ControlProgram([CreateExclusive("x", b"")], lock="missing"))
    with pytest.raises(UnsafePathError):
        await target.run(ControlProgram([CreateExclusive("x", b"")], lock="link"))
    assert not (tmp_path / "x").exists()
