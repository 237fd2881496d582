"""Whether a process group still exists on the machine that holds a
target's root (and, asked to, killing it first): the proof the
unsettled-mutation latch needs that a command an earlier owner started is
gone, answered on this machine or an SSH host by the same executor code."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from .executor import process_identity
from .program import Operation

__all__ = ["GroupState", "ProcessGroup", "RemoteGroup", "process_identity"]


class RemoteGroup(msgspec.Struct, frozen=True):
    """The process group a command has on an SSH host (``SshTarget.
    run_command``'s ``started``), and the host's machine id and boot id
    (None where it does not say)."""

    pgid: int
    machine_id: str | None
    boot_id: str | None


class GroupState(msgspec.Struct, frozen=True):
    #: The machine's ``/etc/machine-id`` and its boot's id (None: unknown).
    machine_id: str | None
    boot_id: str | None
    exists: bool


class ProcessGroup(Operation):
    """Ask whether process group ``pgid`` exists on the target's machine;
    with ``kill``, send it SIGKILL first, only while the machine's boot is
    ``boot_id``. ``value`` is a :class:`GroupState`."""

    pgid: int = 0
    kill: bool = False
    boot_id: str | None = None
    path: str = "."
    accepts_root: ClassVar[bool] = True
    # A kill changes what runs, not the filesystem: no fault is injected.
    writes: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.pgid, bool) or not isinstance(self.pgid, int) or self.pgid < 2:
            raise ValueError("a process group id is a whole number above 1")


def group_state(value: object) -> GroupState:
    """The executor's ``(machine, boot, exists)``, refused unless it has that shape."""
    machine, boot, exists = value  # type: ignore[misc]
    if not all(v is None or isinstance(v, str) for v in (machine, boot)) or not isinstance(exists, bool):
        raise ValueError("a process group's state is two ids and a flag")
    return GroupState(machine, boot, exists)
