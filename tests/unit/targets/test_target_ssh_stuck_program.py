"""A remote program stuck on a host that still answers (a hung mount, a
stopped process: sshd itself keeps answering keepalives) never leaves its
caller waiting: once it made no progress for the program time limit it is
ended, on the host too, and the program is unavailable with its outcome
unknown; the connection serves the next program. A program that is slow,
but not that slow, is never cut. A program whose caller is cancelled (a
$/cancelRequest, a shutdown) has its remote process ended the same way,
while the cancel itself returns at once: stopped processes left behind
would each hold one of the connection's few sessions (sshd's MaxSessions)
until no program could start on it.

A real OpenSSH server on loopback. The remote program is held in its lock
wait (this test holds the program's lock directory), then only its own
python process is stopped with SIGSTOP; the sshd and its connection run on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from deadlines import ticks
from mevedel_server.targets import ControlProgram, CreateExclusive
from mevedel_server.targets.remote_errors import TargetUnavailable
from mevedel_server.targets.ssh import SshTarget
from processes import process_alive
from silent_host import (  # noqa: F401
    flock_waiter,
    held_lock,
    host_processes,
    limit_sessions,
    own_sshd_fixture,
    silenced,
    silent_host_config,
    within,
)
from ssh_fixtures import ALIAS

# Keepalives every second, so that the stuck programs outlast several of them.
KEEPALIVES = dict(ServerAliveInterval=1, ServerAliveCountMax=2)


async def _waiting_remote_program(sshd, program: asyncio.Future | None = None, seen: set[int] = frozenset()) -> int:
    """The remote program's python process once it waits for its lock
    (long after it announced its process id and read its request); one
    not in ``seen``. ``program`` ending first fails with its outcome."""
    for _ in ticks():
        found = flock_waiter([pid for pid in host_processes(sshd) if pid not in seen])
        if found is not None:
            return found
        if program is not None and program.done():
            raise AssertionError(f"the program ended before its remote process waited: {program.exception()!r}")
        await asyncio.sleep(0.02)
    raise AssertionError("the remote program never came to wait for its lock")


async def _stopped_remote_program(sshd, program: asyncio.Future, seen: set[int]) -> int:
    """The program's remote process, found waiting for its lock, then
    stopped with SIGSTOP; added to ``seen``."""
    stuck = await _waiting_remote_program(sshd, program, seen)
    seen.add(stuck)
    os.kill(stuck, signal.SIGSTOP)
    return stuck


async def _cancelled(program: asyncio.Future) -> None:
    program.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(program, "the cancelled program")


async def _gone(pids: set[int], what: str) -> None:
    for _ in ticks():
        if not any(process_alive(pid) for pid in pids):
            return
        await asyncio.sleep(0.05)
    for pid in pids:  # not left behind by the failing test
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"{what} left running on the host")


def _kill_left(pids: set[int]) -> None:
    """What a failed test left stopped on the host (nothing else ends it)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def _target(sshd, tmp_path: Path, limit: float | None, **options) -> tuple[SshTarget, Path]:
    config = silent_host_config(sshd, tmp_path / "ssh_config", **KEEPALIVES)
    root = tmp_path / "root"
    (root / "lock").mkdir(parents=True)
    # spares=0: every program starts its own remote process, so the one
    # waiting for the lock is the program's and no warm one.
    target = await SshTarget.connect(
        f"ssh://{ALIAS}{root}", config=[str(config)], agent_path=None, spares=0, program_timeout=limit, **options
    )
    return target, root


async def test_a_stopped_remote_program_is_ended_and_the_connection_serves_the_next(own_sshd, tmp_path):
    target, root = await _target(own_sshd, tmp_path, limit=5)
    async with target:
        lock = held_lock(root / "lock")
        try:
            program = asyncio.ensure_future(
                target.run(ControlProgram([CreateExclusive("stuck", b"1")], lock="lock"))
            )
            stuck = await _waiting_remote_program(own_sshd)
            # sshd and its connection run on. (On a machine slow enough
            # that the limit passed already, the process blocked in its
            # lock wait was ended instead: the same stuck program.)
            with contextlib.suppress(ProcessLookupError):
                os.kill(stuck, signal.SIGSTOP)
        finally:
            os.close(lock)
        with pytest.raises(TargetUnavailable) as info:
            await within(program, "a program whose remote process is stopped")
        message = str(info.value)
        assert info.value.outcome_unknown, message
        assert ALIAS in message and "no answer within 5 s" in message, message
        # Ended on the host too, not left stopped holding a session.
        await _gone({stuck}, "the stopped remote program was")
        assert not (root / "stuck").exists()
        result = await within(target.run(ControlProgram([CreateExclusive("next", b"2")])), "the next program")
        assert result.completed and (root / "next").read_bytes() == b"2"
        assert target.connections == 1


async def test_a_program_slower_than_the_keepalives_but_within_the_limit_completes(own_sshd, tmp_path):
    target, root = await _target(own_sshd, tmp_path, limit=30)
    async with target:
        lock = held_lock(root / "lock")
        try:
            program = asyncio.ensure_future(
                target.run(ControlProgram([CreateExclusive("slow", b"1")], lock="lock"))
            )
            await _waiting_remote_program(own_sshd)
            # Several keepalive rounds pass while the program waits.
            await asyncio.sleep(4)
        finally:
            os.close(lock)
        result = await within(program, "a program slower than the keepalives")
        assert result.completed and (root / "slow").read_bytes() == b"1"
        assert target.connections == 1


async def test_a_cancelled_program_ends_its_stopped_remote_process(own_sshd, tmp_path):
    # No time limit: only the cancel can end the program.
    target, root = await _target(own_sshd, tmp_path, limit=None)
    stopped: set[int] = set()
    try:
        async with target:
            lock = held_lock(root / "lock")
            try:
                program = asyncio.ensure_future(
                    target.run(ControlProgram([CreateExclusive("cancelled", b"1")], lock="lock"))
                )
                await _stopped_remote_program(own_sshd, program, stopped)
                await _cancelled(program)
                await _gone(stopped, "the stopped remote process of a cancelled program was")
            finally:
                os.close(lock)
            assert not (root / "cancelled").exists()
            result = await within(target.run(ControlProgram([CreateExclusive("next", b"2")])), "the next program")
            assert result.completed and (root / "next").read_bytes() == b"2"
    finally:
        _kill_left(stopped)


async def test_more_cancelled_stopped_programs_than_the_hosts_sessions_leave_the_connection_usable(own_sshd, tmp_path):
    # A host that allows three sessions, and a target that keeps within
    # them: one program at a time (and no warm process), whose remote
    # process, if it has to be ended, is killed from a second channel.
    sessions = 3
    limit_sessions(own_sshd, sessions)
    target, root = await _target(own_sshd, tmp_path, limit=None, max_channels=1)
    stopped: set[int] = set()
    try:
        async with target:
            lock = held_lock(root / "lock")
            try:
                for number in range(sessions + 2):
                    program = asyncio.ensure_future(
                        target.run(ControlProgram([CreateExclusive(f"cancelled{number}", b"1")], lock="lock"))
                    )
                    await _stopped_remote_program(own_sshd, program, stopped)
                    await _cancelled(program)
            finally:
                os.close(lock)
            result = await within(
                target.run(ControlProgram([CreateExclusive("next", b"2")])), "a program after the cancels"
            )
            assert result.completed and (root / "next").read_bytes() == b"2"
            assert target.connections == 1
            await _gone(stopped, "a stopped remote process of a cancelled program was")
    finally:
        _kill_left(stopped)


async def test_a_program_cancelled_on_a_host_gone_silent_returns_and_the_target_closes(own_sshd, tmp_path):
    # Nothing can reach the host to end the process: the cancel still
    # returns, and closing the target (which waits for what it started to
    # end remote processes) ends too, however the host keeps its silence.
    target, root = await _target(own_sshd, tmp_path, limit=None)
    lock = held_lock(root / "lock")
    try:
        program = asyncio.ensure_future(target.run(ControlProgram([CreateExclusive("cancelled", b"1")], lock="lock")))
        await _waiting_remote_program(own_sshd, program)
        with silenced(own_sshd):
            await _cancelled(program)
            await within(target.close(), "closing the target after a cancel on the silent host")
    finally:
        os.close(lock)
