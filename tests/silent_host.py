"""An SSH host that goes silent mid-connection, as one whose network starts
dropping every packet does: the connection stays open, nothing ever answers.

- ``silenced(server)``: every process of a throwaway sshd (the listener, its
  connections, the remote programs they run) stopped with SIGSTOP for as
  long as the block runs, then continued. The kernel still accepts TCP on
  its port, so a new connection waits for a greeting that never comes.
- ``own_sshd`` (imported as ``own_sshd_fixture``): a throwaway sshd for one
  test (a test that silences the shared one would silence every test of
  its worker).
- ``limit_sessions(server, sessions)``: the sshd now allows that many
  sessions (channels running a command) on each new connection.
- ``silent_host_config(server, **limits)``: an ssh client config naming the
  server by its alias with OpenSSH's ``ServerAliveInterval`` and friends:
  how a user shortens the limits, and how the tests do.
- ``killed(server)``: every process of the sshd killed (its connections
  drop), returning once they ended; ``black_hole(port)``: that port then
  accepts connections and never says a word, for as long as the block runs.
- ``ssh_home(tmp_path, server, limits)``: a home whose ssh config reaches
  the server, as a language server started with that ``HOME`` reads it.
- ``within(awaitable, what)``: the test's own bounded wait, which fails
  naming what was never answered.
- ``held_lock(directory)``: the flock a remote program takes on that
  directory, held by the test (a descriptor to close), so that the program
  waits on the host -- a program in flight at a known point;
  ``flock_waiter(pids)``: which of ``pids`` waits for an flock now;
  ``waiting_for_lock(server)``: a process of the sshd, once one waits.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from deadlines import GENEROUS_SECONDS, ticks
from processes import process_alive
from ssh_fixtures import OpenSshServer, sshd_missing, throwaway_sshd


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            found.setdefault(parent, []).append(int(entry.name))
    return found


def host_processes(server: OpenSshServer) -> list[int]:
    """The sshd listener and every process it started, recursively."""
    listener = int((server.directory / "sshd.pid").read_text())
    children = _children()
    found, frontier = [listener], [listener]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


@contextmanager
def silenced(server: OpenSshServer) -> Iterator[None]:
    stopped = []
    try:
        for pid in host_processes(server):
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


@pytest.fixture(name="own_sshd")
def own_sshd_fixture(tmp_path: Path) -> Iterator[OpenSshServer]:
    missing = sshd_missing()
    if missing:
        pytest.skip(missing)
    directory = tmp_path / "sshd"
    directory.mkdir()
    with throwaway_sshd(directory) as server:
        yield server


def limit_sessions(server: OpenSshServer, sessions: int) -> None:
    """``server`` (a throwaway sshd of one test) allows ``sessions``
    sessions on each connection made from now on (its ``MaxSessions``),
    as a host whose administrator lowered OpenSSH's default of ten does.
    sshd rereads its configuration by executing itself again on SIGHUP and
    writes its pid file once it listens again, which this waits for."""
    config = server.directory / "sshd_config"
    lines = [line for line in config.read_text().splitlines() if not line.startswith("MaxSessions ")]
    config.write_text("\n".join([*lines, f"MaxSessions {sessions}", ""]))
    pid_file = server.directory / "sshd.pid"
    listener = int(pid_file.read_text())
    pid_file.unlink()
    os.kill(listener, signal.SIGHUP)
    for _ in ticks():
        if pid_file.exists() and pid_file.read_text().strip():
            return
        time.sleep(0.02)
    raise AssertionError(f"the sshd never listened again after its reload: {(server.directory / 'sshd.log').read_text()[-2000:]}")


def silent_host_config(server: OpenSshServer, path: Path, **limits: int) -> Path:
    """``server``'s client config (its alias) with ``limits`` added, each an
    OpenSSH keyword: ``ServerAliveInterval=1``..."""
    lines = "".join(f"  {keyword} {value}\n" for keyword, value in limits.items())
    path.write_text(server.config.read_text() + lines)
    return path


async def within(awaitable, what: str):
    try:
        return await asyncio.wait_for(awaitable, GENEROUS_SECONDS)
    except TimeoutError:
        raise AssertionError(f"{what} was never answered") from None


def killed(server: OpenSshServer) -> None:
    """SIGKILL to the sshd and every session it started (the remote
    programs included); returns once they all ended, its port free."""
    pids = host_processes(server)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for _ in ticks():
        if not any(process_alive(pid) for pid in pids):
            return
        time.sleep(0.02)
    raise AssertionError("the killed sshd never ended")


@contextmanager
def black_hole(port: int) -> Iterator[None]:
    """``port`` on loopback accepts connections and never says a word."""
    quiet = socket.socket()
    quiet.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    quiet.bind(("127.0.0.1", port))
    quiet.listen(64)
    try:
        yield
    finally:
        quiet.close()


def ssh_home(tmp_path: Path, sshd: OpenSshServer, limits: str = "") -> Path:
    """A home directory whose ``~/.ssh/config`` reaches ``sshd`` as
    127.0.0.1, with ``limits`` (OpenSSH keyword lines) added."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  Port {sshd.port}\n  IdentityFile {sshd.client_key}\n"
        f"  UserKnownHostsFile {sshd.known_hosts}\n  IdentityAgent none\n{limits}"
    )
    return home


def held_lock(directory: Path) -> int:
    fd = os.open(directory, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def flock_waiter(pids: list[int]) -> int | None:
    """One of ``pids`` waiting for an flock, from the kernel's table of
    locks (a waiter's line has ``->`` before its kind)."""
    for line in Path("/proc/locks").read_text().splitlines():
        words = line.split()
        if len(words) > 5 and words[1] == "->" and words[2] == "FLOCK" and int(words[5]) in pids:
            return int(words[5])
    return None


def waiting_for_lock(server: OpenSshServer) -> int:
    """A process of ``server`` (a remote program) once it waits for an flock."""
    for _ in ticks():
        found = flock_waiter(host_processes(server))
        if found is not None:
            return found
        time.sleep(0.02)
    raise AssertionError("no remote program came to wait for its lock")
