"""The unsettled-mutation latch: a command that may outlive its owner.

An agent's shell command changes the workspace outside any checkpoint seam,
and it runs in a process group of its own that can outlive the process that
started it (a crash, a kill, a CLI command that ended). So that the next
owner of the session is told before it mutates on top of it, the lease
generation's ``unsettled_mutation`` latch is set before a command is
launched (rotations and takeovers carry it), and what proves the command
gone is recorded beside it, through the target and behind the lease proof::

    <session>/.mutations/armed-<32 hex>.json

naming the process group, the machine it runs on (``/etc/machine-id``) and
its boot (``/proc/sys/kernel/random/boot_id``): this machine's for a local
command, the SSH host's for a command run there (the host announces them,
``SshTarget.run_command``'s ``started``). When the command's group has been
killed (its terminal released, or the turn ended) its record is removed,
and the latch cleared once no record remains.

A new owner finds the latch set (:meth:`MutationLatch.check`), and asks the
machine that holds the workspace -- the session's target, where its
commands ran, this machine or the SSH host alike -- about every recorded
group in one program (``ProcessGroup``). A record is *proven gone* when
that machine is the one it names and either its boot changed (a reboot
ended every process) or the group no longer exists; proven records are
removed and, when none remains, the latch clears itself. A group that
still exists keeps it (the owner is told which, and what to check); so does
a record of another machine, a missing or unreadable record (a crash
between the latch and its record), a machine without these identities, or
a target that cannot be asked -- unprovable, it clears only on explicit
acknowledgement (:meth:`MutationLatch.acknowledge`).

``SessionService._gated(..., commands=True)`` asks the latch before a
turn's begin, a Rewind, a Redo and a file restore (what changes the
workspace); a rename, save, compaction or clear does not ask.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from typing import Annotated

import msgspec

from ...lazy_decoder import LazyDecoder
from ...targets import (
    ControlProgram,
    CreateExclusive,
    GroupState,
    ListDir,
    MakeDirs,
    ProcessGroup,
    Read,
    Remove,
    Status,
    process_identity,
    raise_for_result,
)
from ..authority.lease import ClientIdentity, LeaseHandle
from ..transactions.recovery import run_guarded

MUTATIONS_DIR = ".mutations"
_RECORD_NAME = re.compile(r"^armed-([0-9a-f]{32})\.json\Z")


class ArmedCommand(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    armed_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}\Z")]
    client_id: str
    host: Annotated[str, msgspec.Meta(max_length=255)]
    machine_id: str | None
    boot_id: str | None
    #: The command's process group (its own session: pgid == its pid).
    pgid: Annotated[int, msgspec.Meta(ge=2)]
    command: Annotated[str, msgspec.Meta(max_length=400)]
    turn: int | None
    armed_at: int
    #: Where it runs when not on the client's own host (an SSH host).
    runs_on: Annotated[str, msgspec.Meta(max_length=255)] | None = None

    @property
    def where(self) -> str:
        return self.runs_on or self.host


_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = LazyDecoder(msgspec.json.Decoder, ArmedCommand)


def machine_identity() -> tuple[str | None, str | None]:
    """This machine's id and its current boot's id (None where unknown)."""
    return process_identity()


def judge(record: ArmedCommand, state: GroupState | None) -> str:
    """``gone``, ``alive`` or ``unprovable``: what the target's answer
    about the record's group proves (None: it could not be asked)."""
    if state is None or None in (record.machine_id, record.boot_id, state.machine_id, state.boot_id):
        return "unprovable"
    if record.machine_id != state.machine_id:
        return "unprovable"  # another machine's group: nothing here can prove it
    if record.boot_id != state.boot_id:
        return "gone"  # that machine rebooted since: every process of that boot is gone
    return "alive" if state.exists else "gone"


def _root(lease: LeaseHandle) -> str:
    return lease.paths.inside(MUTATIONS_DIR)


def _path(lease: LeaseHandle, armed_id: str) -> str:
    return f"{_root(lease)}/armed-{armed_id}.json"


class LatchState(msgspec.Struct, frozen=True):
    """What a check of the latch found (``set`` False: nothing to tell)."""

    set: bool
    #: Recorded commands whose group still exists here.
    alive: tuple[ArmedCommand, ...] = ()
    #: Why the rest cannot be proven gone (None: everything was).
    unprovable: str | None = None

    def message(self) -> str:
        parts = []
        for record in self.alive:
            on = f" on {record.runs_on}" if record.runs_on else ""
            parts.append(
                f"a command of the previous owner ({record.host}, turn {record.turn}) may still be running{on}: "
                f"process group {record.pgid}, `{record.command}`; check with `ps -o pid,cmd -g {record.pgid}`{on} "
                f"and stop it (`kill -- -{record.pgid}`) or wait for it -- the session clears this itself once that group is gone"
            )
        if self.unprovable:
            parts.append(
                f"a command of a previous owner may still be running and cannot be proven gone ({self.unprovable}); "
                "check that nothing it started still changes the workspace, then acknowledge it "
                "(mevedel/session/acknowledgeMutation; on the CLI: mevedel session acknowledge-mutation)"
            )
        return "; ".join(parts)


class MutationLatch:
    """The latch of one open session, as this process sees it. Arming and
    settling are serialized, so a command being armed never sees the
    latch cleared under it by another's settlement."""

    def __init__(self, client: ClientIdentity) -> None:
        self.client = client
        self._lock = asyncio.Lock()
        self._armed: set[str] = set()

    async def arm(self, lease: LeaseHandle) -> None:
        """Set the latch before a command is launched."""
        async with self._lock:
            if not lease.record.unsettled_mutation:
                await lease.set_unsettled_mutation(True)

    async def launched(
        self, lease: LeaseHandle, pgid: int, command: str, turn: int | None, at: int,
        *, machine: tuple[str | None, str | None] | None = None, runs_on: str | None = None,
    ) -> str:
        """Record what proves the launched command's group gone; its id.
        ``machine``: the machine and boot ids of the host it runs on (an
        SSH host's, ``runs_on``), else this machine's."""
        machine_id, boot = machine if machine is not None else machine_identity()
        record = ArmedCommand(
            armed_id=secrets.token_hex(16), client_id=self.client.client_id, host=self.client.host,
            machine_id=machine_id, boot_id=boot, pgid=pgid, command=command[:400], turn=turn, armed_at=at,
            runs_on=runs_on[:255] if runs_on else None,
        )
        ops = [MakeDirs(_root(lease), optional=True), CreateExclusive(_path(lease, record.armed_id), _encoder.encode(record))]
        async with self._lock:
            result, skip = await run_guarded(lease, ops)
            raise_for_result(ops[1], result[skip + 1])
            self._armed.add(record.armed_id)
        return record.armed_id

    async def settled(self, lease: LeaseHandle, armed_id: str | None) -> None:
        """The command's group was killed: drop its record, and the latch
        once no record remains."""
        async with self._lock:
            if armed_id is not None:
                self._armed.discard(armed_id)
                await run_guarded(lease, [Remove(_path(lease, armed_id), optional=True)])
            if not self._armed and lease.record.unsettled_mutation:
                records, _ = await _records(lease)
                if not records:
                    await lease.set_unsettled_mutation(False)

    async def check(self, lease: LeaseHandle) -> LatchState:
        """A new owner's look at an inherited latch: records proven gone
        are removed, and the latch too once none remains."""
        async with self._lock:
            if not lease.record.unsettled_mutation:
                return LatchState(False)
            records, unreadable = await _records(lease)
            mine = [r for r in records if r.armed_id in self._armed]
            theirs = [r for r in records if r.armed_id not in self._armed]
            verdicts = await _ask_target(lease, theirs)
            gone = [r for r, v in zip(theirs, verdicts) if v == "gone"]
            if gone:
                await run_guarded(lease, [Remove(_path(lease, r.armed_id), optional=True) for r in gone])
            alive = tuple(r for r, v in zip(theirs, verdicts) if v == "alive")
            unproven = [r for r, v in zip(theirs, verdicts) if v == "unprovable"]
            why = None
            if unreadable:
                why = f"{unreadable} record(s) of it cannot be read"
            elif unproven:
                why = f"it ran on {unproven[0].where}, whose processes the workspace's machine cannot check"
            elif not records and not self._armed:
                why = "its owner stopped before recording which process group it was"
            if not alive and why is None and not mine and not self._armed:
                await lease.set_unsettled_mutation(False)
                return LatchState(False)
            if not alive and why is None:
                return LatchState(False)  # only this process's own commands keep it
            return LatchState(True, alive, why)

    async def acknowledge(self, lease: LeaseHandle) -> None:
        """The owner confirmed nothing of a previous command still runs:
        every record not this process's goes, and the latch with them."""
        async with self._lock:
            records, _ = await _records(lease, names_only=True)
            stale = [name for name in records if _RECORD_NAME.match(name) and _RECORD_NAME.match(name).group(1) not in self._armed]
            if stale:
                await run_guarded(lease, [Remove(f"{_root(lease)}/{name}", optional=True) for name in stale])
            if not self._armed and lease.record.unsettled_mutation:
                await lease.set_unsettled_mutation(False)


async def _ask_target(lease: LeaseHandle, records: list[ArmedCommand]) -> list[str]:
    """One program asking the workspace's machine about every record's
    group; each record's verdict (:func:`judge`). A target that cannot be
    asked proves nothing."""
    if not records:
        return []
    ops = [ProcessGroup(pgid=r.pgid, optional=True) for r in records]
    try:
        results = await lease.target.run(ControlProgram(ops))
    except Exception:  # unreachable: unprovable now; the next attempt asks again
        return ["unprovable"] * len(records)
    return [judge(r, result.value if result.ok else None) for r, result in zip(records, results)]


async def _records(lease: LeaseHandle, *, names_only: bool = False):
    listing = ListDir(_root(lease), optional=True)
    listed = (await lease.target.run(ControlProgram([listing])))[0]
    if listed.status is Status.ABSENT:
        return [], 0
    raise_for_result(listing, listed)
    names = [name for name in listed.value if _RECORD_NAME.match(name)]
    if names_only:
        return names, 0
    if not names:
        return [], 0
    reads = [Read(f"{_root(lease)}/{name}", optional=True) for name in names]
    results = await lease.target.run(ControlProgram(reads))
    records, unreadable = [], 0
    for name, result in zip(names, results):
        try:
            if not result.ok:
                raise ValueError(result.status.value)
            record = _decoder.decode(result.value)
            if f"armed-{record.armed_id}.json" != name:
                raise ValueError("names another record")
        except (ValueError, msgspec.DecodeError):
            unreadable += 1
            continue
        records.append(record)
    return records, unreadable
