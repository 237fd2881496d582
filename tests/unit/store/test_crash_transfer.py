"""Crash at every write of a granted control transfer after a prompt (the
decision, then the release that commits the owner's final publication, the
agent binding ended): a fresh reader sees the owner still holding what it
had, or the lease released to the requester with the binding ended -- never
a release naming an agent binding of the owner's process -- and the hand-over
finishes: by the owner's restarted process when the crash came before the
release, and the requester then holds the session with a detached agent
history."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from mevedel_server.store import ClientIdentity, observe_lease, read_committed
from mevedel_server.store.content.sidecar import EngineRef, EngineState
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.errors import PublicationFailed
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.service.control import SessionControl
from mevedel_server.targets import (
    FaultInjectingTarget,
    LocalTarget,
    SimulatedCrash,
    TargetError,
)

OWNER = ClientIdentity("desk-client", "desk")
ASKER = ClientIdentity("laptop-client", "laptop")
ENGINE = EngineRef(agent="claude", fingerprint="a" * 64, native_session_id="native-1", machine="desk", state=EngineState.READY)


@dataclass(frozen=True)
class Seen:
    """What a fresh reader sees: who writes the lease head, its state, the
    committed turns and the agent binding's state."""

    client: str
    lease: str
    turns: int
    engine: str


OLD = Seen(OWNER.client_id, "active", 1, "ready")
NEW = Seen(OWNER.client_id, "released", 1, "detached")


async def fresh_reader(root: Path, sid: str) -> Seen:
    target = LocalTarget(root)
    head = (await observe_lease(target, sid)).record
    sidecar = Conversation.restore(await (await read_committed(target, sid)).read_all()).sidecar
    return Seen(head.client_id, head.state.value, sidecar.total_turn_count, sidecar.engine.state.value)


def kill(service: SessionService) -> None:
    """The process died: its renewal timers do not run again either."""
    for sid in service.open_sessions():
        renewal = service.session(sid).renewal
        if renewal is not None:
            renewal.cancel()


def counting(target: FaultInjectingTarget) -> list[list[str]]:
    """The programs ``target`` runs from now on, each as its operations' names."""
    programs: list[list[str]] = []
    run = target.run

    async def counted(program):
        programs.append([type(op).__name__ for op in program.operations])
        return await run(program)

    target.run = counted
    return programs


async def asked(root: Path, power_loss: bool):
    """The owner's session after a prompt (its agent binding ready), a
    request for it waiting, and the owner's control having seen it."""
    root.mkdir()
    target = FaultInjectingTarget(LocalTarget(root), power_loss=power_loss)
    owner = SessionService(target, OWNER, renew_every=3600)
    sid = (await owner.sessions.create()).session_id
    await owner.turns.begin_turn(sid, "first")
    await owner.turns.append(sid, EvidenceInput("response", text="answer"))
    owner.agents.set_engine(sid, ENGINE)
    await owner.turns.settle(sid)
    asker = SessionService(LocalTarget(root), ASKER, renew_every=3600)
    asker_control = SessionControl(asker)
    assert (await asker_control.take(sid)).outcome == "requested"
    owner_control = SessionControl(owner)
    await owner_control.poll()
    assert owner_control.status(sid).phase == "asking"
    return target, owner, owner_control, asker, asker_control, sid


async def finish_after_crash(root: Path, sid: str, seen: Seen, asker: SessionService, asker_control: SessionControl) -> None:
    """The owner's client starts again when the crash left it holding the
    session: it finds its grant (or the request, when the decision was not
    written) and hands over. Then the requester holds the session, its
    agent binding ended, and carries on."""
    if seen == OLD:
        owner = SessionService(LocalTarget(root), OWNER, renew_every=3600)
        await owner.sessions.open(sid, "resume")
        control = SessionControl(owner)
        await control.poll()
        if control.status(sid).phase == "asking":
            await control.grant(sid)
        assert owner.info(sid).access.value == "read-only"
        kill(owner)
    assert await fresh_reader(root, sid) == NEW
    await asker_control.poll()
    assert asker.info(sid).access.value == "writable"
    engine = asker.agents.engine(sid)
    assert engine is not None and engine.state is EngineState.DETACHED and engine.native_session_id is None
    await asker.turns.begin_turn(sid, "carried on")
    await asker.turns.settle(sid)
    assert (await fresh_reader(root, sid)).turns == 2
    await asker.sessions.close(sid)


@pytest.mark.parametrize("power_loss", [False, True], ids=["process-death", "power-loss"])
async def test_crash_at_every_write_of_a_grant(tmp_path, power_loss):
    target, owner, control, _asker, _asker_control, sid = await asked(tmp_path / "baseline", power_loss)
    target.arm(None)
    await control.grant(sid)
    assert await fresh_reader(tmp_path / "baseline", sid) == NEW
    total = target.writes
    kill(owner)
    outcomes: Counter[str] = Counter()
    for point in range(1, total + 2):
        root = tmp_path / f"crash-{point}"
        target, owner, control, asker, asker_control, sid = await asked(root, power_loss)
        target.arm(point, "crash")
        try:
            await control.grant(sid)
        except SimulatedCrash:
            pass
        else:
            assert point == total + 1 and not target.fired
            break
        finally:
            kill(owner)
        seen = await fresh_reader(root, sid)
        # The agent binding's end is committed by the release itself: no
        # state between them, and no release without it.
        assert seen in (OLD, NEW), f"crash point {point}: a reader saw {seen}"
        outcomes["old" if seen == OLD else "new"] += 1
        await finish_after_crash(root, sid, seen, asker, asker_control)
    print(f"\ngrant: {sum(outcomes.values())} crash points walked, outcomes {dict(outcomes)}")
    # The decision, the fence and the publication's writes come before the
    # release (the commit point); only its prunes after it.
    assert sum(outcomes.values()) == total and outcomes["old"] >= 5 and outcomes["new"] >= 1


async def test_an_error_at_any_write_of_a_grant_leaves_a_hand_over_that_finishes(tmp_path):
    """A write that fails (the host refused it, the connection dropped)
    instead of a crash: the reader sees the old or the new state as above,
    and the same process finishes the hand-over without anyone's retry --
    asking again when the decision was not written, else at its next look:
    its final publication, left pending by the failure, published again as
    the release, or the release made again."""
    target, owner, control, _asker, _asker_control, sid = await asked(tmp_path / "baseline", False)
    target.arm(None)
    await control.grant(sid)
    total = target.writes
    kill(owner)
    ways: Counter[str] = Counter()
    for point in range(1, total + 1):
        root = tmp_path / f"error-{point}"
        target, owner, control, asker, asker_control, sid = await asked(root, False)
        target.arm(point, "error")
        try:
            await control.grant(sid)
        except TargetError:
            assert control.status(sid).phase == "asking"  # the decision itself failed
        assert target.fired
        assert await fresh_reader(root, sid) in (OLD, NEW)
        way = []
        for _ in range(3):
            if owner.info(sid).access.value == "read-only":
                break
            status = control.status(sid)
            if status.phase == "asking":
                way.append("asked again")
                await control.grant(sid)
                continue
            # What the owner is told while it waits: the release failed, and
            # why; nothing for a person to do.
            assert status.waiting_for == "its release to be tried again" and status.failure, f"error at write {point}: {status}"
            pending = owner.session(sid).pending is not None
            programs = counting(target)
            await control.poll()
            way.append("its publication released again" if pending else "released again")
            if pending:  # as the first attempt: one program publishes, releases (and drops its record)
                assert len(programs) == 1 and owner.info(sid).access.value == "read-only", f"error at write {point}: {programs}"
        assert owner.info(sid).access.value == "read-only", f"error at write {point}: {control.status(sid)}"
        assert owner.session(sid).pending is None
        # Its durable record went with the release: the requester finds
        # nothing pending to clean up.
        assert not (root / ".mevedel" / "sessions" / sid / ".pending-publication").exists(), f"error at write {point}"
        ways[", ".join(way) or "released"] += 1
        kill(owner)
        await finish_after_crash(root, sid, NEW, asker, asker_control)
    print(f"\ngrant: an error at each of {total} writes, finished by {dict(ways)}")
    # The decision's error is answered by asking again; one at the
    # publication's writes or the release leaves the final publication
    # pending, which the next look publishes again as the release.
    assert ways["asked again"] == 1 and ways["its publication released again"] >= 5, ways


async def test_a_process_that_stops_after_an_error_leaves_a_hand_over_the_next_one_finishes(tmp_path):
    """The process stops after the failed write (a CLI command ends, an
    editor quits): the next process of the same client finds the grant
    standing -- and, when the final publication failed, that publication's
    durable record -- and finishes the hand-over at its first look, without
    anyone's retry: the record is the release's own (the grant's fence is
    written), published again as the release."""
    target, owner, control, _asker, _asker_control, sid = await asked(tmp_path / "baseline", False)
    target.arm(None)
    await control.grant(sid)
    total = target.writes
    kill(owner)
    recorded = 0
    for point in range(1, total + 1):
        root = tmp_path / f"error-{point}"
        target, owner, control, asker, asker_control, sid = await asked(root, False)
        target.arm(point, "error")
        try:
            await control.grant(sid)
        except TargetError:
            pass
        recorded += owner.session(sid).pending is not None
        kill(owner)
        await finish_after_crash(root, sid, await fresh_reader(root, sid), asker, asker_control)
        assert not (root / ".mevedel" / "sessions" / sid / ".pending-publication").exists(), f"error at write {point}"
    assert recorded >= 5


async def test_a_pending_publication_from_before_the_grant_waits_for_the_person(tmp_path):
    """A save that failed before the grant is the person's to retry or
    abandon: the drain waits for that at every look, however often it looks
    and in a process started afterwards too, and hands over once the person
    retried it -- with what it held."""
    target, owner, control, asker, asker_control, sid = await asked(tmp_path / "ws", False)
    await owner.turns.begin_turn(sid, "second")
    await owner.turns.append(sid, EvidenceInput("response", text="second answer"))
    target.arm(1, "error")
    with pytest.raises(PublicationFailed):
        await owner.turns.settle(sid)
    assert owner.session(sid).pending is not None
    await control.grant(sid)
    for _ in range(3):
        await control.poll()
        status = control.status(sid)
        assert status.waiting_for == "the pending publication to be retried or abandoned" and status.failure is None
        assert owner.info(sid).access.value == "writable"
    # A process that starts afterwards (the record restored) waits the same.
    kill(owner)
    owner = SessionService(LocalTarget(tmp_path / "ws"), OWNER, renew_every=3600)
    await owner.sessions.open(sid, "resume")
    control = SessionControl(owner)
    await control.poll()
    assert control.status(sid).waiting_for == "the pending publication to be retried or abandoned"
    assert owner.info(sid).access.value == "writable"
    await owner.sessions.retry_publication(sid)
    await control.poll()
    assert owner.info(sid).access.value == "read-only"
    kill(owner)
    await asker_control.poll()
    assert asker.info(sid).settled_turns == 2
    await asker.sessions.close(sid)
