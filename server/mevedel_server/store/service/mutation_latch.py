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
killed (its terminal released, or the turn ended) its record is removed;
the last command's settlement clears the latch and then removes the
records in one program, so that a process killed in between leaves no
latch rather than a latch without a record (the unknown case below). A
command armed and not yet recorded holds the latch as a recorded one does.

A new owner finds the latch set (:meth:`MutationLatch.check`), and asks the
machine that holds the workspace -- the session's target, where its
commands ran, this machine or the SSH host alike -- about every recorded
group in one program (``ProcessGroup``). A record is *proven gone* when
that machine is the one it names and either its boot changed (a reboot
ended every process) or the group no longer exists; proven records are
removed and, when none other remains, the latch clears itself (cleared
first, in the removals' program, as a settlement's). A group that
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
#: What keeps a latch found without any record (no command id has a dash).
_UNRECORDED = "-unrecorded"


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
    latch cleared under it by another's settlement.

    The latch is cleared before any record goes, in the same program (its
    rotation, then the removals): a process killed anywhere in between
    leaves either the latch with its records (the next owner asks about
    their groups) or no latch (records left without one are of commands
    known ended: the next arming lists them and the next clearing removes
    them). Only a latch with no record at all is unknown: its owner
    stopped between setting it and recording the group."""

    def __init__(self, client: ClientIdentity) -> None:
        self.client = client
        self._lock = asyncio.Lock()
        #: This process's commands armed and not settled (each may run),
        #: and whether its record was (or may have been) written.
        self._armed: dict[str, bool] = {}
        #: The lease what follows was learnt under (another owner may have
        #: held the session between two handles).
        self._lease: LeaseHandle | None = None
        #: The records of commands not this process's that may still run,
        #: :data:`_UNRECORDED` for a latch found without a record; None: not
        #: looked at under this lease.
        self._others: set[str] | None = None
        #: Records of commands known ended, removed by the next program that
        #: clears the latch (or once the latch is clear, by a settlement's).
        self._ended: set[str] = set()

    def _under(self, lease: LeaseHandle) -> None:
        if lease is not self._lease:
            self._lease, self._others, self._ended = lease, None, set()

    async def arm(self, lease: LeaseHandle) -> str:
        """Set the latch before a command is launched; the command's id
        (:meth:`launched` records its group under it). The records a clear
        latch leaves are listed in the same program: their commands ended."""
        async with self._lock:
            self._under(lease)
            if not lease.record.unsettled_mutation:
                (listed,) = await lease.set_unsettled_mutation(True, then=[ListDir(_root(lease), optional=True)])
                self._others = set()
                if listed.ok:
                    self._ended.update(i for i in _ids(listed.value) if i not in self._armed)
            armed_id = secrets.token_hex(16)
            self._armed[armed_id] = False
            return armed_id

    async def launched(
        self, lease: LeaseHandle, pgid: int, command: str, turn: int | None, at: int,
        *, machine: tuple[str | None, str | None] | None = None, runs_on: str | None = None, armed_id: str | None = None,
    ) -> str:
        """Record what proves the launched command's group gone under
        ``armed_id`` (:meth:`arm`'s; None: armed now, as a command launched
        before its session was saved is); its id. ``machine``: the machine
        and boot ids of the host it runs on (an SSH host's, ``runs_on``),
        else this machine's."""
        if armed_id is None:
            armed_id = await self.arm(lease)
        machine_id, boot = machine if machine is not None else machine_identity()
        record = ArmedCommand(
            armed_id=armed_id, client_id=self.client.client_id, host=self.client.host,
            machine_id=machine_id, boot_id=boot, pgid=pgid, command=command[:400], turn=turn, armed_at=at,
            runs_on=runs_on[:255] if runs_on else None,
        )
        ops = [MakeDirs(_root(lease), optional=True), CreateExclusive(_path(lease, record.armed_id), _encoder.encode(record))]
        async with self._lock:
            self._under(lease)
            self._armed[armed_id] = True
            result, skip = await run_guarded(lease, ops)
            raise_for_result(ops[1], result[skip + 1])
        return armed_id

    async def settled(self, lease: LeaseHandle, armed_id: str) -> None:
        """The command ``armed_id`` (:meth:`arm`'s) ended: it never
        started, or its group was killed. Its record goes, and with the
        last command's the latch, cleared first in the same program."""
        async with self._lock:
            self._under(lease)
            if self._armed.pop(armed_id, True):
                self._ended.add(armed_id)
            if self._armed or not lease.record.unsettled_mutation:
                await self._remove_ended(lease)  # another command holds the latch, or nothing does
                return
            if self._others is None:
                # Not looked at under this lease (the latch was set when it
                # was taken): a record not this process's keeps the latch.
                self._others = set(await _record_ids(lease)) - self._ended
            if self._others:
                await self._remove_ended(lease)
                return
            await self._clear(lease)

    async def check(self, lease: LeaseHandle) -> LatchState:
        """A new owner's look at an inherited latch: records proven gone
        are removed, and the latch too once none remains."""
        async with self._lock:
            self._under(lease)
            if not lease.record.unsettled_mutation:
                self._others = set()
                return LatchState(False)
            before = self._others
            records, unreadable = await _records(lease)
            theirs = [r for r in records if r.armed_id not in self._armed and r.armed_id not in self._ended]
            verdicts = await _ask_target(lease, theirs)
            self._ended.update(r.armed_id for r, v in zip(theirs, verdicts) if v == "gone")
            alive = tuple(r for r, v in zip(theirs, verdicts) if v == "alive")
            unproven = [r for r, v in zip(theirs, verdicts) if v == "unprovable"]
            unreadable = [i for i in unreadable if i not in self._armed and i not in self._ended]
            self._others = {r.armed_id for r in (*alive, *unproven)} | set(unreadable)
            why = None
            if unreadable:
                why = f"{len(unreadable)} record(s) of it cannot be read"
            elif unproven:
                why = f"it ran on {unproven[0].where}, whose processes the workspace's machine cannot check"
            elif not records and not self._armed and (before is None or _UNRECORDED in before):
                why = "its owner stopped before recording which process group it was"
                self._others = {_UNRECORDED}
            if alive or why is not None or self._armed:
                await self._remove_ended(lease)
                # Only this process's own commands keep it: nothing to tell.
                return LatchState(True, alive, why) if alive or why is not None else LatchState(False)
            await self._clear(lease)
            return LatchState(False)

    async def acknowledge(self, lease: LeaseHandle) -> None:
        """The owner confirmed nothing of a previous command still runs:
        every record not this process's goes, and the latch with them."""
        async with self._lock:
            self._under(lease)
            self._ended.update(i for i in await _record_ids(lease) if i not in self._armed)
            self._others = set()
            if not self._armed and lease.record.unsettled_mutation:
                await self._clear(lease)
            else:
                await self._remove_ended(lease)

    async def _clear(self, lease: LeaseHandle) -> None:
        """The latch cleared, then the records of ended commands: one program."""
        ended = sorted(self._ended)
        results = await lease.set_unsettled_mutation(False, then=[Remove(_path(lease, i), optional=True) for i in ended])
        self._gone(ended, results)

    async def _remove_ended(self, lease: LeaseHandle) -> None:
        if not self._ended:
            return
        ended = sorted(self._ended)
        result, skip = await run_guarded(lease, [Remove(_path(lease, i), optional=True) for i in ended])
        self._gone(ended, result.results[skip:])

    def _gone(self, ended: list[str], results) -> None:
        self._ended.difference_update(i for i, r in zip(ended, results) if r.status in (Status.OK, Status.ABSENT))


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


def _ids(names) -> list[str]:
    return [m.group(1) for m in map(_RECORD_NAME.match, names) if m]


async def _record_ids(lease: LeaseHandle) -> list[str]:
    """The ids of the records there (one program)."""
    listing = ListDir(_root(lease), optional=True)
    listed = (await lease.target.run(ControlProgram([listing])))[0]
    if listed.status is Status.ABSENT:
        return []
    raise_for_result(listing, listed)
    return _ids(listed.value)


async def _records(lease: LeaseHandle) -> tuple[list[ArmedCommand], list[str]]:
    """The records there, and the ids of those that cannot be read."""
    ids = await _record_ids(lease)
    if not ids:
        return [], []
    reads = [Read(_path(lease, i), optional=True) for i in ids]
    results = await lease.target.run(ControlProgram(reads))
    records, unreadable = [], []
    for armed_id, result in zip(ids, results):
        try:
            if not result.ok:
                raise ValueError(result.status.value)
            record = _decoder.decode(result.value)
            if record.armed_id != armed_id:
                raise ValueError("names another record")
        except (ValueError, msgspec.DecodeError):
            unreadable.append(armed_id)
            continue
        records.append(record)
    return records, unreadable
