"""SessionControl with two (and three) clients in one process on one local
workspace, each poll driven by hand: request and keep, grant that drains a
turn in flight, grant by timeout measured from the owner's first sight,
release, and an expired owner taken over only with confirmation."""

from __future__ import annotations

import asyncio
import time

import pytest

from deadlines import ticks
from mevedel_server.store import (
    ClientIdentity,
    TakeoverNeedsConfirmation,
    observe_lease,
)
from mevedel_server.store.errors import LeaseHeld
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.service.control import SessionControl
from mevedel_server.store.service.errors import SessionReadOnly, TransferDraining
from mevedel_server.store.watching.watch import WatchCadence
from mevedel_server.targets import CreateExclusive, LocalTarget, ProgramTarget, Read
from mevedel_server.targets.errors import TargetOperationError


def client(root, name: str, host: str, lease_seconds: int = 60) -> tuple[SessionService, SessionControl, list]:
    service = SessionService(LocalTarget(root), ClientIdentity(name, host), lease_seconds=lease_seconds)
    control = SessionControl(service)
    control.configure(prompt_timeout=30)
    events: list = []
    control.on_event.append(events.append)
    return service, control, events


async def turn(service: SessionService, sid: str, prompt: str, *, settle: bool = True) -> None:
    await service.turns.begin_turn(sid, prompt)
    await service.turns.append(sid, EvidenceInput("response", text=f"answer to {prompt}"))
    if settle:
        await service.turns.settle(sid)


def phases(events: list) -> list[str]:
    return [e.phase for e in events]


async def owned_session(root):
    owner = client(root, "desk-client", "desk")
    sid = (await owner[0].sessions.create()).session_id
    await turn(owner[0], sid, "first")
    return owner, sid


async def test_keep_ends_the_request_and_a_fresh_one_can_follow(tmp_path):
    (owner, owner_ctl, owner_events), sid = await owned_session(tmp_path)
    asker, asker_ctl, asker_events = client(tmp_path, "laptop-client", "laptop")
    taken = await asker_ctl.take(sid)
    assert taken.outcome == "requested" and taken.owner_host == "desk"
    assert asker_ctl.transfer_in_flight(sid) and asker.info(sid).access.value == "read-only"
    await owner_ctl.poll()
    assert phases(owner_events) == ["asking"] and owner_events[0].requester_host == "laptop"
    assert owner_ctl.status(sid).phase == "asking" and owner_ctl.transfer_in_flight(sid)
    await owner_ctl.keep(sid)
    await asker_ctl.poll()
    assert phases(asker_events) == ["requested", "rejected"] and not asker_ctl.transfer_in_flight(sid)
    assert (await observe_lease(owner.target, sid)).record.client_id == "desk-client"
    again = await asker_ctl.take(sid)  # the keep opened the next transfer generation
    assert again.outcome == "requested"
    await owner_ctl.poll()
    assert phases(owner_events) == ["asking", "kept", "asking"]


async def test_grant_drains_the_turn_in_flight_then_hands_over(tmp_path):
    (owner, owner_ctl, owner_events), sid = await owned_session(tmp_path)
    asker, asker_ctl, asker_events = client(tmp_path, "laptop-client", "laptop")
    await turn(owner, sid, "second", settle=False)
    await asker_ctl.take(sid)
    await owner_ctl.poll()
    await owner_ctl.grant(sid)
    assert owner_ctl.status(sid).phase == "draining"
    assert owner_events[-1].waiting_for == "turn 2 to settle"
    await asker_ctl.poll()
    assert phases(asker_events) == ["requested", "granted"]
    with pytest.raises(TransferDraining):
        await owner.sessions.rename(sid, "Renamed while draining")  # no new mutation ...
    await owner.turns.append(sid, EvidenceInput("response", text="more of the turn"))
    await owner.turns.checkpoint(sid)
    await owner.turns.settle(sid)  # ... but the turn in flight may finish
    with pytest.raises(TransferDraining, match="being handed to laptop"):
        await owner.turns.begin_turn(sid, "third")  # ... new work may not start
    await owner_ctl.poll()
    assert phases(owner_events)[-1] == "released"
    assert owner.info(sid).access.value == "read-only"
    with pytest.raises(SessionReadOnly):
        await owner.turns.begin_turn(sid, "third")
    await asker_ctl.poll()
    assert phases(asker_events)[-1] == "acquired"
    info = asker.info(sid)
    assert info.access.value == "writable" and info.settled_turns == 2  # no committed turn lost
    await turn(asker, sid, "third")
    third = client(tmp_path, "tablet-client", "tablet")
    with pytest.raises(LeaseHeld):
        await third[0].sessions.open(sid, "resume")
    # and back again: the old owner is a requester like any other
    back = await owner_ctl.take(sid)
    assert back.outcome == "requested"
    await asker_ctl.poll()
    await asker_ctl.grant(sid)
    await owner_ctl.poll()
    assert owner.info(sid).access.value == "writable" and owner.info(sid).settled_turns == 3


async def test_an_unanswered_request_is_granted_after_the_timeout(tmp_path):
    (owner, owner_ctl, owner_events), sid = await owned_session(tmp_path)
    owner_ctl.configure(prompt_timeout=1)
    asker, asker_ctl, asker_events = client(tmp_path, "laptop-client", "laptop")
    # Wall clock, as the target's is: taken before the owner can see the request.
    before_sight = time.time()
    await asker_ctl.take(sid)
    await owner_ctl.poll()
    asking = owner_events[0]
    assert asking.phase == "asking" and asking.deadline is not None
    for _ in ticks():
        await owner_ctl.poll()
        if "released" in phases(owner_events):
            break
        await asyncio.sleep(0.05)
    # The question stayed up the whole second, however late in the target
    # clock's whole second the owner first saw the request.
    assert time.time() - before_sight >= 1
    assert phases(owner_events) == ["asking", "released"]
    await asker_ctl.poll()
    assert asker.info(sid).access.value == "writable"


async def test_release_control_saves_and_follows(tmp_path):
    (owner, owner_ctl, owner_events), sid = await owned_session(tmp_path)
    asker, asker_ctl, _ = client(tmp_path, "laptop-client", "laptop")
    await asker.sessions.open(sid, "join")
    result, info = await owner_ctl.release(sid)
    assert result is not None and result.committed and info.access.value == "read-only"
    taken = await asker_ctl.take(sid)
    assert taken.outcome == "acquired" and taken.info.access.value == "writable"
    await turn(asker, sid, "second")
    assert (await owner.turns.summaries(sid))[-1].preview == "second"  # the follower reads the new head


async def test_a_turn_in_flight_refuses_release(tmp_path):
    (owner, owner_ctl, _), sid = await owned_session(tmp_path)
    await turn(owner, sid, "second", settle=False)
    with pytest.raises(Exception, match="turn 2 is in flight"):
        await owner_ctl.release(sid)


async def test_an_expired_foreign_lease_is_taken_only_with_confirmation(tmp_path):
    owner = client(tmp_path, "gone-client", "old-laptop", lease_seconds=1)
    sid = (await owner[0].sessions.create()).session_id
    await turn(owner[0], sid, "first")
    await owner[0].sessions.detach()
    asker, asker_ctl, _ = client(tmp_path, "laptop-client", "laptop")
    for _ in ticks():
        if (await observe_lease(asker.target, sid)).standing.value == "expired":
            break
        await asyncio.sleep(0.05)
    with pytest.raises(TakeoverNeedsConfirmation):
        await asker_ctl.take(sid)
    taken = await asker_ctl.take(sid, confirm_takeover=True)
    assert taken.outcome == "took-over" and taken.info.settled_turns == 1


class FailingReads(ProgramTarget):
    """The requester's view of the workspace, whose published bytes can be
    made unreadable (a connection that fails mid-refresh)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.failing = False

    async def run(self, program):
        if self.failing and any(isinstance(op, Read) and "/.publications/" in op.path for op in program.operations):
            raise TargetOperationError("published bytes", "the read failed (simulated)")
        return await self.inner.run(program)


async def test_a_failed_refresh_leaves_the_requester_read_only_without_the_lease(tmp_path):
    (owner, owner_ctl, owner_events), sid = await owned_session(tmp_path)
    target = FailingReads(LocalTarget(tmp_path))
    asker = SessionService(target, ClientIdentity("laptop-client", "laptop"))
    asker_ctl = SessionControl(asker)
    asker_events: list = []
    asker_ctl.on_event.append(asker_events.append)
    await asker_ctl.take(sid)
    await owner_ctl.poll()
    await owner_ctl.grant(sid)
    assert phases(owner_events)[-1] == "released"
    target.failing = True
    await asker_ctl.poll()
    assert phases(asker_events)[-1] == "failed" and "the read failed" in asker_events[-1].message
    assert asker.info(sid).access.value == "read-only"  # still open, following
    head = (await observe_lease(LocalTarget(tmp_path), sid)).record
    assert head.client_id != "laptop-client" or head.state.value == "released"
    target.failing = False
    retried = await asker_ctl.take(sid)  # the fence still reserves it for this client
    assert retried.outcome == "acquired" and retried.info.settled_turns == 1


class GatedPublications(ProgramTarget):
    """Holds every program that writes a publication until ``gate`` opens."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = asyncio.Event()

    async def run(self, program):
        if any(isinstance(op, CreateExclusive) and "/.publications/" in op.path for op in program.operations):
            self.held.set()
            await self.gate.wait()
        return await self.inner.run(program)


async def test_a_grant_waits_for_the_operation_in_progress(tmp_path):
    target = GatedPublications(LocalTarget(tmp_path))
    owner = SessionService(target, ClientIdentity("desk-client", "desk"))
    owner_ctl = SessionControl(owner)
    owner_events: list = []
    owner_ctl.on_event.append(owner_events.append)
    sid = (await owner.sessions.create()).session_id
    await turn(owner, sid, "first")
    asker, asker_ctl, asker_events = client(tmp_path, "laptop-client", "laptop")
    await asker_ctl.take(sid)
    await owner_ctl.poll()
    target.gate.clear()
    renaming = asyncio.get_running_loop().create_task(owner.sessions.rename(sid, "Renamed before the hand-over"))
    await target.held.wait()  # the rename is publishing now
    await owner_ctl.grant(sid)
    assert owner_events[-1].phase == "draining"
    assert owner_events[-1].waiting_for == "the operation in progress to finish"
    target.gate.set()
    await renaming
    await owner_ctl.poll()
    assert phases(owner_events)[-1] == "released"
    await asker_ctl.poll()
    info = asker.info(sid)
    assert info.access.value == "writable" and info.display_name == "Renamed before the hand-over"


async def test_closing_a_session_ends_its_transfer_in_flight(tmp_path):
    (owner, owner_ctl, _), sid = await owned_session(tmp_path)
    asker, asker_ctl, _ = client(tmp_path, "laptop-client", "laptop")
    await asker_ctl.take(sid)
    await owner_ctl.poll()
    assert owner_ctl.transfer_in_flight(sid) and asker_ctl.transfer_in_flight(sid)
    await asker.sessions.close(sid)
    await asker_ctl.poll()
    assert not asker_ctl.transfer_in_flight()
    await owner.sessions.close(sid)
    await owner_ctl.poll()
    assert not owner_ctl.transfer_in_flight()


async def test_without_a_watcher_the_cadence_poll_still_finds_the_request(tmp_path):
    def no_watcher(session_id, wake):
        raise ImportError("no filesystem notifications here")

    (owner, _, _), sid = await owned_session(tmp_path)
    control = SessionControl(owner, watch=no_watcher)
    control.configure(watch=WatchCadence(idle_seconds=0.2, active_seconds=0.1))
    events: list = []
    control.on_event.append(events.append)
    control.start()
    try:
        asker, asker_ctl, _ = client(tmp_path, "laptop-client", "laptop")
        await asker_ctl.take(sid)
        for _ in ticks():
            if events:
                break
            await asyncio.sleep(0.05)
        assert [e.phase for e in events] == ["asking"]
    finally:
        await control.stop()
