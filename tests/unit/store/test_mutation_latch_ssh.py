"""The unsettled-mutation latch around shell commands on an SSH workspace
(a real OpenSSH server on loopback): the command runs in a process group of
its own on the host, announced with the host's machine and boot and
recorded before it does anything; a new owner is told while it still runs
there, every mutating entry (a turn's begin, Rewind, a restore) is refused
naming it, and the latch clears itself once the host proves the group gone.
A released terminal's group is killed on the host, background children
included, and its record dropped; a command there costs four round trips
around it."""

from __future__ import annotations

import asyncio
import os

import pytest

from counted_programs import CountedPrograms as Counting
from deadlines import ticks
from mevedel_server.agents.terminals import Terminal, Terminals
from mevedel_server.store import (
    ClientIdentity,
    LeaseStanding,
    acquire_lease,
    materialize_session,
    observe_lease,
)
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.service.errors import UnsettledMutation
from mevedel_server.store.service.mutation_latch import MutationLatch

ME = ClientIdentity("client-me", "workstation")
OTHER = ClientIdentity("client-other", "laptop")
SID = "2026-12-06T19-47-5e771ed1a7c4"


class SessionLatch:
    """The engine's latch adapter, for one session (agents/running_agent.py _Latch)."""

    def __init__(self, service: SessionService, sid: str, host: str) -> None:
        self.service, self.sid, self.host = service, sid, host
        self.recorded = asyncio.Event()

    async def arm(self, terminal: Terminal) -> None:
        session = self.service.session(self.sid)
        terminal.armed_id = await session.latch.arm(session.lease)

    async def launched(self, terminal: Terminal) -> None:
        session = self.service.session(self.sid)
        group = terminal.remote_group
        terminal.armed_id = await session.latch.launched(
            session.lease, terminal.pgid, terminal.command, 1, session.time.now(),
            machine=(group.machine_id, group.boot_id), runs_on=self.host, armed_id=terminal.armed_id,
        )
        self.recorded.set()

    async def stopped(self, terminal: Terminal) -> None:
        session = self.service.session(self.sid)
        await session.latch.settled(session.lease, terminal.armed_id)


async def saved(service: SessionService) -> str:
    sid = (await service.sessions.create()).session_id
    await service.turns.begin_turn(sid, "first")
    await service.turns.append(sid, EvidenceInput("response", text="done"))
    await service.turns.settle(sid)
    return sid


def group_exists(pgid: int) -> bool:  # the SSH host is this machine
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def group_gone(pgid: int, failure: str) -> None:
    for _ in ticks():
        if not group_exists(pgid):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(failure)


async def nothing() -> None:
    return None


async def test_a_new_owner_is_told_of_a_command_still_running_on_the_host_until_it_is_proven_gone(ssh_connect, tmp_path):
    owner = SessionService(await ssh_connect(tmp_path), ME, lease_seconds=1)
    sid = await saved(owner)
    latch = SessionLatch(owner, sid, "the-ssh-host")
    terminals = Terminals(owner.target, str(tmp_path), before=nothing, after=nothing, latch=latch)
    terminal = await terminals.create("sh -c 'sleep 300'", None, {}, None, None)
    await asyncio.wait_for(latch.recorded.wait(), 60)
    pgid = terminal.pgid
    assert group_exists(pgid) and terminal.remote_group.boot_id is not None
    # The owner stops renewing (a laptop suspended, its connection alive):
    # the command goes on on the host.
    await owner.sessions.detach()
    for _ in ticks():
        if (await observe_lease(await ssh_connect(tmp_path), sid)).standing is LeaseStanding.EXPIRED:
            break
        await asyncio.sleep(0.05)
    heir = SessionService(await ssh_connect(tmp_path), OTHER)
    await heir.sessions.open(sid, confirm_takeover=True)
    state = await heir.turns.unsettled_mutation(sid)
    assert state.set and [r.pgid for r in state.alive] == [pgid]
    assert f"process group {pgid}" in state.message() and "on the-ssh-host" in state.message()
    for entry in (heir.turns.begin_turn(sid, "next"), heir.history.prepare_rewind(sid, "before", 1), heir.turns.restore_file(sid, "a.txt", 1)):
        with pytest.raises(UnsettledMutation) as refused:
            await entry
        assert f"process group {pgid}" in str(refused.value) and "sleep 300" in str(refused.value)
    # The owner gives the command up: its channel closes and the host's
    # watchdog kills the whole group.
    terminal.task.cancel()
    await terminal.done.wait()
    await group_gone(pgid, "the group outlived its channel")
    started = await heir.turns.begin_turn(sid, "next")  # re-proven on the host: cleared with no user action
    assert started.turn == 2
    assert not (await observe_lease(heir.target, sid)).record.unsettled_mutation
    assert not list((tmp_path / ".mevedel" / "sessions" / sid / ".mutations").glob("armed-*"))
    await heir.turns.abort(sid)
    await heir.sessions.close(sid)


async def test_releasing_a_remote_terminal_kills_what_it_left_running_and_settles_the_latch(ssh_connect, tmp_path):
    owner = SessionService(await ssh_connect(tmp_path), ME)
    sid = await saved(owner)
    latch = SessionLatch(owner, sid, "the-ssh-host")
    terminals = Terminals(owner.target, str(tmp_path), before=nothing, after=nothing, latch=latch)
    terminal = await terminals.create("sh -c 'sleep 300 >/dev/null 2>&1 & echo started'", None, {}, None, None)
    await terminals.wait(terminal.terminal_id)
    assert "started" in terminal.text and terminal.exit_code == 0
    pgid = terminal.pgid
    assert group_exists(pgid)  # the background child lives on in the group, as locally
    assert (await observe_lease(owner.target, sid)).record.unsettled_mutation
    await terminals.release(terminal.terminal_id)
    await group_gone(pgid, "the background child outlived its terminal's release")
    assert not (await observe_lease(owner.target, sid)).record.unsettled_mutation
    assert not list((tmp_path / ".mevedel" / "sessions" / sid / ".mutations").glob("armed-*"))
    await owner.sessions.close(sid)


class LeaseLatch:
    """The latch adapter over a bare lease (no session's background work)."""

    def __init__(self, lease) -> None:
        self.lease, self.latch = lease, MutationLatch(ME)

    async def arm(self, terminal: Terminal) -> None:
        terminal.armed_id = await self.latch.arm(self.lease)

    async def launched(self, terminal: Terminal) -> None:
        group = terminal.remote_group
        await self.latch.launched(
            self.lease, terminal.pgid, terminal.command, 1, 0, machine=(group.machine_id, group.boot_id), runs_on="the-ssh-host",
            armed_id=terminal.armed_id,
        )

    async def stopped(self, terminal: Terminal) -> None:
        await self.latch.settled(self.lease, terminal.armed_id)


async def test_a_command_on_the_host_costs_four_round_trips_around_it(ssh_connect, tmp_path):
    """The latch set, the group recorded, the group killed at release, and
    the latch cleared with the record removed: one program each."""
    counted = Counting(await ssh_connect(tmp_path))
    await materialize_session(counted, SID)
    lease = await acquire_lease(counted, SID, ME, duration_seconds=600)
    terminals = Terminals(counted, str(tmp_path), before=nothing, after=nothing, latch=LeaseLatch(lease))
    before = counted.programs
    terminal = await terminals.create("true", None, {}, None, None)
    await terminals.wait(terminal.terminal_id)
    await terminals.release(terminal.terminal_id)
    assert counted.programs - before == 4
    assert not (await observe_lease(counted, SID)).record.unsettled_mutation
    assert not list((tmp_path / ".mevedel" / "sessions" / SID / ".mutations").glob("armed-*"))
