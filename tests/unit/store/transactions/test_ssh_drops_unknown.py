"""A connection to an SSH workspace that drops in the publishing program of
a Fork, a Save As or a turn's settlement while the host goes away: the user
is told the change may or may not have been made and what to run once the
host is back, and that answers with what the host really holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.store.transactions.test_ssh_drops_rewind import (
    ME,
    _connect,
    _resumed,
    _three_turns,
)
from txn_sessions import git, init_repo, open_session

from mevedel_server.store import OutcomeUnknown, PendingSpool, PublicationUnknown
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.transactions.worktree_fork import (
    WorktreeForkFailed,
    commit_worktree_fork,
    prepare_worktree_fork,
)
from mevedel_server.targets import LocalTarget

DROPS = ["drop-after-run", "drop-before-run"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def _gone_at_the_publication(fault_server, drop: str) -> None:
    # A Barrier flushes a publication before its head: its program alone has one.
    fault_server.when, fault_server.then_unreachable = (b"Barrier", drop), True


@pytest.mark.parametrize("drop", DROPS)
@pytest.mark.parametrize("operation", ["fork", "save as"])
async def test_a_child_whose_host_went_away_is_said_maybe_made_and_the_listing_answers(root, fault_server, drop, operation):
    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = await _resumed(target, sid)
        if operation == "fork":
            impact = await svc.history.prepare_fork(sid, 2)
            commit = svc.history.commit_fork
        else:
            impact = await svc.history.prepare_save_as(sid, "Copy")
            commit = svc.history.commit_save_as
        _gone_at_the_publication(fault_server, drop)
        with pytest.raises(OutcomeUnknown) as caught:
            await commit(sid, impact.token)
        message = str(caught.value)
        assert caught.value.kind == "unavailable" and caught.value.follow_up == "list"
        assert message.startswith(f"session {sid}: the {operation} may or may not have made the new session ")
        assert "cannot be reached now" in message and "publication pending" not in message
        assert message.endswith(f"list the sessions: the new session is there if the {operation} was applied")
        child = message.split("the new session ", 1)[1].split(":", 1)[0]
        await fault_server.start()
        listed = {row.session_id for row in (await SessionService(target, ME).sessions.list()).rows}
        # Made exactly when its program ran; never a half-made one listed.
        assert listed == ({sid, child} if drop == "drop-after-run" else {sid})
        if drop == "drop-after-run":
            assert (await _resumed(target, child)).info(child).settled_turns == (2 if operation == "fork" else 3)
    finally:
        await target.close()


@pytest.mark.parametrize("drop", DROPS)
async def test_a_settlement_whose_host_went_away_is_pending_as_unknown_and_the_retry_publishes_it_once(root, fault_server, drop):
    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = await _resumed(target, sid)
        await svc.turns.begin_turn(sid, "turn 4")
        await svc.turns.append(sid, EvidenceInput("response", text="done"))
        _gone_at_the_publication(fault_server, drop)
        with pytest.raises(PublicationUnknown) as caught:
            await svc.turns.settle(sid)
        message = str(caught.value)
        assert "it may or may not have been published" in message and "cannot be reached now" in message
        assert message.endswith("retry the publication: it publishes it unless the host already holds it")
        await fault_server.start()
        saved = await svc.sessions.retry_publication(sid)
        # What the host held decides: published by the lost program, or now.
        assert saved.committed == (drop == "drop-before-run")
        assert (await _resumed(target, sid)).info(sid).settled_turns == 4
    finally:
        await target.close()


@pytest.mark.parametrize("drop", DROPS)
async def test_a_worktree_fork_whose_host_went_away_offers_its_cleanup_only_for_a_fork_not_made(root, fault_server, drop):
    init_repo(root)
    (root / "a.txt").write_bytes(b"a0\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")
    target = await _connect(fault_server, root)
    try:
        s = await open_session(root, target=target)
        await s.turn("one", {"a.txt": b"a1\n"})
        await s.turn("two", {"a.txt": b"a2\n"})
        impact = await prepare_worktree_fork(target, s.session_id, 1)
        _gone_at_the_publication(fault_server, drop)
        fault_server.when_skip = 1  # the worktree's files are flushed first
        with pytest.raises(WorktreeForkFailed) as caught:
            await commit_worktree_fork(target, impact.token, ME)
        message = str(caught.value)
        assert caught.value.follow_up == "list" and "the worktree fork may or may not have made the new session" in message
        assert "if it is not there, what git created is kept -- remove it from the workspace with: git worktree remove" in message
        child = message.split("the new session ", 1)[1].split(":", 1)[0]
        await fault_server.start()
        listed = {row.session_id for row in (await SessionService(target, ME).sessions.list()).rows}
        assert (child in listed) == (drop == "drop-after-run")
        assert (root / ".worktrees" / "fork-1" / "a.txt").read_bytes() == b"a1\n"  # kept either way
    finally:
        await target.close()


#: Names of two workspaces in a client's spool (digests of their locations).
THIS_WORKSPACE, A_COPY = "a" * 32, "b" * 32


async def test_a_settlement_kept_for_one_workspace_is_not_moved_into_a_copy_of_it(root, tmp_path, fault_server):
    """A workspace copied elsewhere has sessions of the same IDs: what this
    machine keeps for one workspace's session is never recorded in the
    other's, and stays for the workspace it belongs to."""
    spool = tmp_path / "spool"
    spool.mkdir()
    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = SessionService(target, ME, pending_spool=PendingSpool(LocalTarget(spool), THIS_WORKSPACE))
        await svc.sessions.list()
        await svc.sessions.open(sid, "resume")
        await svc.turns.begin_turn(sid, "turn 4")
        await svc.turns.append(sid, EvidenceInput("response", text="done"))
        _gone_at_the_publication(fault_server, "drop-before-run")
        with pytest.raises(PublicationUnknown) as caught:
            await svc.turns.settle(sid)
        assert caught.value.spooled
        await fault_server.start()
        copy = SessionService(target, ME, pending_spool=PendingSpool(LocalTarget(spool), A_COPY))
        await copy.sessions.list()
        await copy.sessions.open(sid, "resume")
        assert copy.info(sid).pending_publication is None and copy.info(sid).settled_turns == 3
        assert not (root / ".mevedel" / "sessions" / sid / ".pending-publication").exists()
        assert len(list((spool / "unrecorded" / THIS_WORKSPACE / sid).glob("pending-*.json"))) == 1
    finally:
        await target.close()


async def test_a_settlement_kept_on_this_machine_and_abandoned_is_not_offered_again(root, tmp_path, fault_server):
    """The host went away with the settlement's answer and could not record
    it pending, so the client's spool on this machine keeps it; abandoning
    it drops that copy too, and the next process that resumes the session
    is offered nothing to retry."""
    spool = tmp_path / "spool"
    spool.mkdir()

    async def resumed() -> SessionService:
        svc = SessionService(target, ME, pending_spool=PendingSpool(LocalTarget(spool), THIS_WORKSPACE))
        await svc.sessions.list()
        await svc.sessions.open(sid, "resume")
        return svc

    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = await resumed()
        await svc.turns.begin_turn(sid, "turn 4")
        await svc.turns.append(sid, EvidenceInput("response", text="done"))
        _gone_at_the_publication(fault_server, "drop-before-run")
        with pytest.raises(PublicationUnknown) as caught:
            await svc.turns.settle(sid)
        assert caught.value.spooled and not caught.value.recorded
        kept = spool / "unrecorded" / THIS_WORKSPACE / sid
        assert len(list(kept.glob("pending-*.json"))) == 1
        assert await svc.sessions.abandon_publication(sid)
        assert not kept.exists()
        await fault_server.start()
        later = await resumed()
        assert later.info(sid).pending_publication is None and later.info(sid).settled_turns == 3
    finally:
        await target.close()
