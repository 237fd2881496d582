"""Release control (``mevedel session release-control``, the editor's
Release): held here with a conversation to publish, the explicit save is
the release -- one program whose released generation names the new head.
A failed one releases nothing and leaves this client holding and renewing
the session, its save pending as any failed save leaves it; a crash at any
of its writes leaves a reader the owner's old state held or its new state
released, never the old state released."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from counted_programs import CountedPrograms
from deadlines import ticks
from mevedel_server.store import (
    PRODUCT_STORAGE,
    ClientIdentity,
    observe_lease,
    read_committed,
)
from mevedel_server.store.content.sidecar import EngineRef, EngineState
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.errors import LeaseLost, PublicationPending
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.service.control import ReleaseFailed, SessionControl
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

OWNER = ClientIdentity("desk-client", "desk")
ENGINE = EngineRef(agent="claude", fingerprint="a" * 64, native_session_id="native-1", machine="desk", state=EngineState.READY)


async def prompted(service: SessionService, prompt: str = "first", sid: str | None = None) -> str:
    """A settled turn with the agent binding ready (as a prompt leaves it)."""
    if sid is None:
        sid = (await service.sessions.create()).session_id
    await service.turns.begin_turn(sid, prompt)
    await service.turns.append(sid, EvidenceInput("response", text=f"answer to {prompt}"))
    service.agents.set_engine(sid, ENGINE)
    await service.turns.settle(sid)
    return sid


async def seen(root: Path, sid: str) -> tuple[str, str | None, str]:
    """What a fresh reader sees: the lease head's state, the publication
    head it names and the committed agent binding's state."""
    target = LocalTarget(root)
    head = (await observe_lease(target, sid)).record
    sidecar = Conversation.restore(await (await read_committed(target, sid)).read_all()).sidecar
    return head.state.value, head.publication_head, sidecar.engine.state.value


def stop(service: SessionService) -> None:
    """The process is gone: its renewal timers do not run again."""
    for sid in service.open_sessions():
        renewal = service.session(sid).renewal
        if renewal is not None:
            renewal.cancel()


async def test_a_servers_release_after_a_prompt_is_one_program(tmp_path):
    """The explicit save and the release in one program (two before: the
    save's commit, then the release)."""
    counting = CountedPrograms(LocalTarget(tmp_path))
    owner = SessionService(counting, OWNER)
    sid = await prompted(owner)
    before = counting.programs
    result, info = await SessionControl(owner).release(sid)
    assert counting.programs - before == 1
    assert result is not None and result.committed and info.access.value == "read-only"
    state, head, engine = await seen(tmp_path, sid)
    assert (state, head, engine) == ("released", result.head, "detached")


async def test_a_cli_release_control_after_a_prompt_is_three_programs(tmp_path):
    """``mevedel session release-control`` after a ``mevedel prompt``: the
    listing that finds the held session (1), the claim with the committed
    bytes (1) and the release, whose commit is the explicit save (1): four
    while the save was a commit of its own before the release."""
    cli = {**PRODUCT_STORAGE, "one_command": True, "leases_outlive_process": True}
    prompt = SessionService(LocalTarget(tmp_path), OWNER, **cli)
    sid = await prompted(prompt)
    await prompt.sessions.detach()
    counting = CountedPrograms(LocalTarget(tmp_path))
    release = SessionService(counting, OWNER, **cli)
    (row,) = (await release.sessions.list()).rows
    assert row.session_id == sid and row.holder_is_self
    await release.sessions.open(sid, "resume")
    result, _ = await SessionControl(release).release(sid)
    await release.sessions.detach()
    assert result is not None and result.committed
    assert counting.programs == 3
    assert (await seen(tmp_path, sid))[0] == "released"


async def test_a_never_materialized_session_is_released_without_a_write(tmp_path):
    counting = CountedPrograms(LocalTarget(tmp_path))
    owner = SessionService(counting, OWNER)
    sid = (await owner.sessions.create()).session_id
    before = counting.programs
    result, info = await SessionControl(owner).release(sid)
    assert result is None and info.access.value == "read-only"
    assert counting.programs == before
    assert not (tmp_path / ".mevedel" / "sessions" / sid).exists()


async def test_a_pending_publication_from_before_refuses_the_release(tmp_path):
    """The person decides on a failed save (retry or abandon), not the
    release: refused, still held and writable, nothing written."""
    target = FaultInjectingTarget(LocalTarget(tmp_path))
    owner = SessionService(target, OWNER, renew_every=3600)
    sid = await prompted(owner)
    target.arm(1, "error")
    with pytest.raises(Exception):
        await prompted(owner, "second", sid)
    session = owner.session(sid)
    assert session.pending is not None
    target.arm(None)
    with pytest.raises(PublicationPending):
        await SessionControl(owner).release(sid)
    assert target.writes == 0
    assert owner.info(sid).access.value == "writable" and session.renewal is not None
    assert (await seen(tmp_path, sid))[0] == "active"
    await owner.sessions.retry_publication(sid)
    await SessionControl(owner).release(sid)
    assert (await seen(tmp_path, sid))[0] == "released"
    assert [t.preview for t in await owner.turns.summaries(sid)] == ["first", "second"]


async def test_a_lost_lease_is_not_released(tmp_path):
    """Taken over while it was expired: the release finds it lost and
    writes nothing over the new holder's lease; the session is read-only."""
    owner = SessionService(LocalTarget(tmp_path), OWNER, lease_seconds=1, renew_every=3600)
    sid = await prompted(owner)
    other = SessionService(LocalTarget(tmp_path), ClientIdentity("laptop-client", "laptop"))
    for _ in ticks():
        if (await observe_lease(other.target, sid)).standing.value == "expired":
            break
        await asyncio.sleep(0.05)
    taken = await SessionControl(other).take(sid, confirm_takeover=True)
    assert taken.outcome == "took-over"
    with pytest.raises(LeaseLost):
        await SessionControl(owner).release(sid)
    assert owner.info(sid).access.value == "read-only"
    head = (await observe_lease(other.target, sid)).record
    assert head.client_id == "laptop-client" and head.state.value == "active"
    stop(owner)
    stop(other)


async def test_an_error_at_any_write_of_the_release_leaves_it_held_and_renewed(tmp_path):
    """A write of the releasing program that fails (the host refused it,
    the connection dropped): either the commit happened (its answer lost;
    the session is released) or nothing was released -- this client holds
    the session, renews it again, the save pending and journalled as any
    failed save, and it is told so and what to do; retrying the publication
    and releasing again then releases with the new head."""
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    target = FaultInjectingTarget(LocalTarget(baseline))
    owner = SessionService(target, OWNER, renew_every=3600)
    sid = await prompted(owner)
    target.arm(None)
    await SessionControl(owner).release(sid)
    total = target.writes
    failed = released = 0
    for point in range(1, total + 1):
        root = tmp_path / f"error-{point}"
        root.mkdir()
        target = FaultInjectingTarget(LocalTarget(root))
        owner = SessionService(target, OWNER, renew_every=3600)
        sid = await prompted(owner)
        old = (await observe_lease(target, sid)).record.publication_head
        control = SessionControl(owner)
        target.arm(point, "error")
        try:
            await control.release(sid)
        except ReleaseFailed as error:
            failed += 1
            assert "control was not released: this client still holds the session" in str(error)
            assert "retry the publication (or abandon it), then release control again" in str(error)
            session = owner.session(sid)
            assert owner.info(sid).access.value == "writable", f"error at write {point}"
            assert session.renewal is not None and session.renewal.running, f"error at write {point}"
            assert session.pending is not None and session.pending.record is not None, f"error at write {point}"
            assert (root / ".mevedel" / "sessions" / sid / ".pending-publication").exists()
            assert await seen(root, sid) == ("active", old, "ready"), f"error at write {point}"
            await owner.sessions.retry_publication(sid)
            result, _ = await control.release(sid)
            assert result is not None and result.committed
        else:
            released += 1
        assert target.fired
        state, head, engine = await seen(root, sid)
        assert (state, engine) == ("released", "detached") and head != old, f"error at write {point}"
        stop(owner)
    print(f"\nrelease: an error at each of {total} writes: {failed} failed, {released} released anyway")
    # The publication's writes and the released generation come first; only
    # the prunes after the commit point.
    assert failed >= 5 and failed + released == total


@pytest.mark.parametrize("power_loss", [False, True], ids=["process-death", "power-loss"])
async def test_a_crash_at_any_write_of_the_release_leaves_old_held_or_new_released(tmp_path, power_loss):
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    target = FaultInjectingTarget(LocalTarget(baseline), power_loss=power_loss)
    owner = SessionService(target, OWNER, renew_every=3600)
    sid = await prompted(owner)
    target.arm(None)
    await SessionControl(owner).release(sid)
    total = target.writes
    stop(owner)
    outcomes = {"old": 0, "new": 0}
    for point in range(1, total + 1):
        root = tmp_path / f"crash-{point}"
        root.mkdir()
        target = FaultInjectingTarget(LocalTarget(root), power_loss=power_loss)
        owner = SessionService(target, OWNER, renew_every=3600)
        sid = await prompted(owner)
        old = (await observe_lease(target, sid)).record.publication_head
        target.arm(point, "crash")
        with pytest.raises(SimulatedCrash):
            await SessionControl(owner).release(sid)
        stop(owner)
        state, head, engine = await seen(root, sid)
        if state == "active":
            assert (head, engine) == (old, "ready"), f"crash at write {point}: {state} {head} {engine}"
            outcomes["old"] += 1
        else:
            # Released only with the new head: never the old state released.
            assert (state, engine) == ("released", "detached") and head != old, f"crash at write {point}: {state} {head} {engine}"
            outcomes["new"] += 1
        # The next process of this client resumes a held session and
        # releases it; a released one is anyone's.
        again = SessionService(LocalTarget(root), OWNER, renew_every=3600)
        await again.sessions.open(sid, "resume")
        await SessionControl(again).release(sid)
        assert (await seen(root, sid))[0] == "released"
        stop(again)
    print(f"\nrelease: {total} crash points walked, outcomes {outcomes}")
    assert outcomes["old"] >= 5 and outcomes["new"] >= 1
