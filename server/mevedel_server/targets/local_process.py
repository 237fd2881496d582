"""Which process this is, and whether a process recorded earlier has ended,
told from this machine's ``/proc``.

A lease names the process that holds it (:class:`ProcessIdentity`) so that
a client on the same machine can prove that holder dead and offer its
session at once instead of waiting for the lease to expire. The proof has
to survive what can fool a PID:

- another machine, or this machine after a reboot: the kernel's boot id
  (a random UUID per boot) and the host name must both be this process's;
- another PID namespace on the same kernel (a container shares the boot
  id, not the PIDs): the PID namespace must be this process's;
- PID reuse: the start time in clock ticks since boot (``/proc/PID/stat``
  field 22) must be the recorded one. The kernel shifts that number by the
  *reader's* time namespace, so the time namespace must match too.

Only "this process has ended" is ever proven; anything unreadable, any
field that differs or is missing, is doubt, and doubt means the holder may
be alive (the caller then waits for the lease's expiry). A process is
ended when no process has its PID here (``kill(pid, 0)`` says ESRCH:
unlike a missing ``/proc`` entry, no ``hidepid`` mount can fake that),
when the PID belongs to a process with another start time, or when it is
a zombie (it has exited; only its parent has not reaped it yet).
"""

from __future__ import annotations

import os
import re
import socket
from typing import Annotated

import msgspec

BOOT_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z"
_NAMESPACE = re.compile(r"^[a-z_]+:\[([0-9]+)\]\Z")
_Number = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class ProcessIdentity(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True, gc=False):
    """One process of one boot of one machine, for as long as the boot lasts."""

    hostname: Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
    boot_id: Annotated[str, msgspec.Meta(pattern=BOOT_ID_PATTERN)]
    #: Inode numbers of ``/proc/self/ns/pid`` and ``/proc/self/ns/time``
    #: (None: a kernel without time namespaces).
    pid_namespace: _Number
    time_namespace: _Number | None
    pid: Annotated[int, msgspec.Meta(ge=1, le=2**31)]
    #: ``/proc/PID/stat`` field 22: clock ticks after boot at which it started.
    start_ticks: _Number


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as file:
            return file.read(4096).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _namespace(kind: str) -> int | None:
    try:
        found = _NAMESPACE.match(os.readlink(f"/proc/self/ns/{kind}"))
    except OSError:
        return None
    return int(found.group(1)) if found else None


def _stat(pid: int | str) -> tuple[str, int] | None:
    """``pid``'s state letter and start ticks, or None when unreadable."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    # The command name (field 2) may hold spaces and parentheses; it ends at
    # the last ')'.
    fields = text.rpartition(")")[2].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def this_boot() -> str | None:
    """This machine's boot id (a random UUID per boot), or None when
    unreadable."""
    return _read("/proc/sys/kernel/random/boot_id")


_observed: tuple[int, ProcessIdentity | None] | None = None


def this_process() -> ProcessIdentity | None:
    """This process, or None when ``/proc`` cannot say who it is (then no
    lease of it can ever be proven abandoned, and no other can be judged).
    Observed once per PID: none of it changes while the process lives, and a
    forked child is another process."""
    global _observed
    pid = os.getpid()
    if _observed is None or _observed[0] != pid:
        _observed = (pid, _observe(pid))
    return _observed[1]


def _observe(pid: int) -> ProcessIdentity | None:
    try:
        if os.readlink("/proc/self") != str(pid):
            return None  # a /proc of another PID namespace: its numbers are not ours
    except OSError:
        return None
    boot = this_boot()
    stat = _stat(pid)
    pid_namespace = _namespace("pid")
    hostname = socket.gethostname()
    if boot is None or stat is None or pid_namespace is None or not 1 <= len(hostname) <= 255:
        return None
    try:
        # Converted, not constructed: conversion checks the constraints a
        # reader's decoder will check.
        return msgspec.convert(
            dict(hostname=hostname, boot_id=boot, pid_namespace=pid_namespace, time_namespace=_namespace("time"),
                 pid=pid, start_ticks=stat[1]),
            ProcessIdentity,
        )
    except msgspec.ValidationError:
        return None


def process_is_here(recorded: ProcessIdentity) -> bool:
    """Whether ``recorded`` can be judged from here at all: it ran on this
    machine in this boot, in this process's PID and time namespaces."""
    me = this_process()
    return me is not None and (recorded.hostname, recorded.boot_id, recorded.pid_namespace, recorded.time_namespace) == (
        me.hostname, me.boot_id, me.pid_namespace, me.time_namespace
    )


def process_has_ended(recorded: ProcessIdentity) -> bool:
    """Whether ``recorded`` is proven to have ended, judged from here: it
    ran on this machine in this boot, in this process's PID and time
    namespaces, and its PID is free now, a zombie's, or another process's.
    False means alive *or unknown*."""
    me = this_process()
    if me is None or not process_is_here(recorded):
        return False
    if recorded.pid == me.pid:
        return recorded.start_ticks != me.start_ticks
    try:
        os.kill(recorded.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: it exists; its /proc entry tells which
    except OSError:
        return False
    stat = _stat(recorded.pid)
    if stat is None:
        return False  # hidden or just gone: doubt
    state, start_ticks = stat
    return start_ticks != recorded.start_ticks or state in ("Z", "X")


def process_end_fd(recorded: ProcessIdentity) -> int | None:
    """A file descriptor that becomes readable when ``recorded`` ends (a
    pidfd, for the caller to close), so its end can be waited for instead
    of polled; None when it cannot be had: judged from elsewhere, a kernel
    or Python without ``pidfd_open``, or ``recorded`` not seen running now.
    Opened first and checked after: ``recorded`` existed before the call,
    so if it still runs at the check, the PID opened was already its own."""
    if not hasattr(os, "pidfd_open") or not process_is_here(recorded):
        return None
    try:
        fd = os.pidfd_open(recorded.pid)
    except OSError:
        return None
    stat = _stat(recorded.pid)
    if stat is None or stat[1] != recorded.start_ticks or stat[0] in ("Z", "X"):
        os.close(fd)
        return None
    return fd
