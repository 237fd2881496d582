"""Following in the service: a read-only session advances through committed
publications in whole settled turns (new, replaced, removed), reports names
and lease holders, adopts a mid-turn checkpoint silently, costs one lease
observation when nothing changed, can be switched off, and is never
advanced over changes this client never committed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from counted_programs import CountedPrograms as Counting
from deadlines import ticks
from mevedel_server.store import ClientIdentity, LeaseHeld, LeaseLost
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.service.following import (
    ADVANCED,
    HELD_BACK,
    UNCHANGED,
    WRITABLE,
    FollowUpdate,
)
from mevedel_server.store.watching.follow import diff_conversations, settled_turns
from mevedel_server.targets import LocalTarget

OWNER = ClientIdentity("client-owner", "owner-box")
FOLLOWER = ClientIdentity("client-follower", "follower-box")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


async def settle(service: SessionService, sid: str, prompt: str, answer: str | None = None) -> None:
    await service.turns.begin_turn(sid, prompt)
    await service.turns.append(sid, EvidenceInput("response", text=answer or f"answer to {prompt}"))
    await service.turns.settle(sid)


async def owner_and_follower(root: Path) -> tuple[SessionService, SessionService, str, list[FollowUpdate], Counting]:
    owner = SessionService(LocalTarget(root), OWNER)
    sid = (await owner.sessions.create("Shared work")).session_id
    await settle(owner, sid, "first")
    counting = Counting(LocalTarget(root))
    follower = SessionService(counting, FOLLOWER)
    opened = await follower.sessions.open(sid)
    assert opened.action == "join"
    told: list[FollowUpdate] = []
    follower.following.on_follow.append(told.append)
    return owner, follower, sid, told, counting


async def test_a_settled_turn_is_reported_whole(root):
    owner, follower, sid, told, _ = await owner_and_follower(root)
    try:
        await settle(owner, sid, "second")
        update = await follower.following.follow(sid)
        assert update.status == ADVANCED and update.report and told == [update]
        assert [(t.turn, t.change, t.state, t.preview) for t in update.change.turns] == [(2, "new", "completed", "second")]
        assert update.change.removed == () and not update.change.renamed
        assert update.holder_host == "owner-box" and update.lease_state == "active"
        assert [t.turn for t in await follower.turns.summaries(sid)] == [1, 2]
    finally:
        await owner.sessions.close_all()


async def test_nothing_new_costs_one_lease_observation(root):
    owner, follower, sid, told, counting = await owner_and_follower(root)
    try:
        before = counting.programs, len(counting.kinds)
        update = await follower.following.follow(sid)
        assert update.status == UNCHANGED and not update.report and told == []
        assert counting.programs - before[0] == 1
        assert counting.kinds[before[1]:] == ["ListDir", "ReadNewest", "Stat"]  # no manifest, no artifact
    finally:
        await owner.sessions.close_all()


async def test_a_mid_turn_checkpoint_is_adopted_silently(root):
    owner, follower, sid, told, _ = await owner_and_follower(root)
    try:
        await owner.turns.begin_turn(sid, "long one")
        await owner.turns.append(sid, EvidenceInput("response", text="partial"))
        await owner.turns.checkpoint(sid)
        update = await follower.following.follow(sid)
        assert update.status == ADVANCED and not update.report and told == []
        assert update.change.turns == ()
        await owner.turns.append(sid, EvidenceInput("response", text="rest"))
        await owner.turns.settle(sid)
        update = await follower.following.follow(sid)
        assert [(t.turn, t.change) for t in update.change.turns] == [(2, "new")] and update.report
    finally:
        await owner.sessions.close_all()


async def test_a_rename_is_reported(root):
    owner, follower, sid, told, _ = await owner_and_follower(root)
    try:
        await owner.sessions.rename(sid, "Better name")
        update = await follower.following.follow(sid)
        assert update.report and update.change.renamed and update.change.turns == ()
        assert update.display_name == "Better name" and update.named
        assert follower.info(sid).display_name == "Better name"
    finally:
        await owner.sessions.close_all()


async def test_a_rewind_reports_removed_and_replaced_turns(root):
    owner, follower, sid, told, _ = await owner_and_follower(root)
    try:
        await settle(owner, sid, "second")
        await settle(owner, sid, "third")
        await follower.following.follow(sid)
        impact = await owner.history.prepare_rewind(sid, "before", 2)
        await owner.history.commit_rewind(sid, impact.token)
        update = await follower.following.follow(sid)
        assert update.change.removed == (2, 3) and update.change.turns == ()
        await settle(owner, sid, "second, again")
        update = await follower.following.follow(sid)
        assert [(t.turn, t.change, t.preview) for t in update.change.turns] == [(2, "new", "second, again")]
    finally:
        await owner.sessions.close_all()


def test_a_changed_turn_under_the_same_number_is_replaced():
    from mevedel_server.store.content.turns import Conversation

    wid = "a" * 64
    ids = iter(f"{n:016x}" for n in range(1, 100))
    old = Conversation.new(session_id="2026-07-19T09-47-bf87b5dd793a", workspace_id=wid, at=1)
    old._fresh_turn_id = lambda: next(ids)  # type: ignore[method-assign]
    old.begin_turn("q", at=2)
    old.settle("completed", at=3)
    new = Conversation.restore(old.artifacts_for_save().artifacts)
    assert diff_conversations(old, new).turns == ()
    other = Conversation.new(session_id="2026-07-19T09-47-bf87b5dd793a", workspace_id=wid, at=1)
    other.begin_turn("q", at=2)
    other.settle("completed", at=3)
    change = diff_conversations(old, other)
    assert [(t.turn, t.change) for t in change.turns] == [(1, "replaced")]
    assert list(settled_turns(other)) == [1]


async def test_a_holder_change_alone_is_reported(root):
    owner, follower, sid, told, _ = await owner_and_follower(root)
    await owner.sessions.close(sid)  # releases: nobody holds it now
    update = await follower.following.follow(sid)
    assert update.report and update.holder_changed and update.holder_host is None
    assert update.lease_state == "released"


async def test_switched_off_it_advances_only_on_an_explicit_step(root):
    owner, follower, sid, told, _ = await owner_and_follower(root)
    try:
        follower.following.set_follow(sid, False)
        assert not follower.following.active(sid)
        await settle(owner, sid, "second")
        assert [t.turn for t in await follower.turns.summaries(sid)] == [1]  # a read does not advance it
        assert told == []
        update = await follower.following.follow(sid)  # the explicit refresh does
        assert update.status == ADVANCED and [t.turn for t in update.change.turns] == [2]
        follower.following.set_follow(sid, True)
        await settle(owner, sid, "third")
        assert [t.turn for t in await follower.turns.summaries(sid)] == [1, 2, 3]
        assert [t.turn for t in told[-1].change.turns] == [3]
    finally:
        await owner.sessions.close_all()


async def test_the_owner_has_nothing_to_follow(root):
    owner = SessionService(LocalTarget(root), OWNER)
    sid = (await owner.sessions.create()).session_id
    await settle(owner, sid, "first")
    try:
        assert (await owner.following.follow(sid)).status == WRITABLE
        assert not owner.following.active(sid)
    finally:
        await owner.sessions.close_all()


async def test_uncommitted_changes_here_are_never_overwritten(root):
    """A client whose lease was taken over after it expired keeps the turn
    it could not publish; the new owner's publications are held back."""
    first = SessionService(LocalTarget(root), OWNER, lease_seconds=1)
    sid = (await first.sessions.create()).session_id
    await settle(first, sid, "first")
    await first.turns.begin_turn(sid, "unpublished")
    await first.turns.append(sid, EvidenceInput("response", text="kept only here"))
    await first.session(sid).stop_renewal()  # it stops renewing (a suspended machine)
    successor = SessionService(LocalTarget(root), FOLLOWER)
    for _ in ticks():
        try:
            await successor.sessions.open(sid, "takeover", confirm_takeover=True)
            break
        except LeaseHeld:  # not expired yet by the target clock
            await asyncio.sleep(0.1)
    await settle(successor, sid, "successor's turn")
    with pytest.raises(LeaseLost):
        await first.turns.checkpoint(sid)  # the lost lease: read-only from now on
    told: list[FollowUpdate] = []
    first.following.on_follow.append(told.append)
    update = await first.following.follow(sid)
    assert update.status == HELD_BACK and update.report and "never committed" in update.held_back
    assert [t.state for t in await first.turns.summaries(sid)][-1] == "in-flight"  # its own work, still here
    again = await first.following.follow(sid)
    assert again.status == HELD_BACK and not again.report  # told once per head
    # Dropping the pending save keeps the turn in the live copy: still held.
    assert await first.sessions.abandon_publication(sid)
    dropped = await first.following.follow(sid)
    assert dropped.status == HELD_BACK and "(a save is pending" not in dropped.held_back
    assert [t.state for t in await first.turns.summaries(sid)][-1] == "in-flight"
    await successor.sessions.close_all()


async def test_overlapping_steps_report_a_publication_once(root):
    owner, follower, sid, told, _ = await owner_and_follower(root)
    try:
        await settle(owner, sid, "second")
        updates = await asyncio.gather(follower.following.follow(sid), follower.turns.summaries(sid), follower.following.follow(sid))
        assert [u.status for u in (updates[0], updates[2])].count(ADVANCED) == 1
        assert len(told) == 1 and [t.turn for t in told[0].change.turns] == [2]
    finally:
        await owner.sessions.close_all()
