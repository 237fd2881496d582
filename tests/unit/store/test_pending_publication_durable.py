"""Nothing lost at exit: a publication that failed is journalled in the
session directory, so a process that stops before a retry loses nothing.
A new service (the next CLI command, a restarted server, another client
that takes the lease over) opens the session publication pending again,
and its retry publishes exactly what was pending -- locally and over SSH."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from deadlines import ticks
from mevedel_server.store import (
    ClientIdentity,
    LeaseStanding,
    PublicationFailed,
    PublicationPending,
    observe_lease,
)
from mevedel_server.store.authority.publication import read_committed
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.layout import SessionPaths
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.transactions.pending_publication import (
    find_pending,
    pending_listing,
)
from mevedel_server.targets import ControlProgram, FaultInjectingTarget, LocalTarget

ME = ClientIdentity("client-me", "workstation")
OTHER = ClientIdentity("client-other", "laptop")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def pending_dir(root: Path, sid: str) -> Path:
    return root / ".mevedel" / "sessions" / sid / ".pending-publication"


async def committed(target, sid: str) -> Conversation:
    snapshot = await read_committed(target, sid)
    return Conversation.restore(await snapshot.read_all())


async def one_turn(svc: SessionService, sid: str, prompt: str, answer: str = "done") -> None:
    await svc.turns.begin_turn(sid, prompt)
    await svc.turns.append(sid, EvidenceInput("response", text=answer))
    await svc.turns.settle(sid)


async def failed_second_turn(target: FaultInjectingTarget, svc: SessionService) -> str:
    """Session with one committed turn and a second whose settlement the
    target refused; the service then stops as a process exit does."""
    sid = (await svc.sessions.create()).session_id
    await one_turn(svc, sid, "first")
    await svc.turns.begin_turn(sid, "the pending turn")
    await svc.turns.append(sid, EvidenceInput("response", text="the answer that must not be lost"))
    target.arm(3, "error")  # inside the publication program
    with pytest.raises(PublicationFailed):
        await svc.turns.settle(sid)
    assert svc.info(sid).pending_publication
    await svc.sessions.detach()  # the process ends without a retry
    return sid


async def test_a_new_process_finds_the_pending_publication_and_its_retry_publishes_it(root):
    first = FaultInjectingTarget(LocalTarget(root))
    sid = await failed_second_turn(first, SessionService(first, ME))
    assert pending_dir(root, sid).is_dir()
    assert (await committed(LocalTarget(root), sid)).sidecar.total_turn_count == 1

    again = SessionService(LocalTarget(root), ME)
    await again.sessions.open(sid)
    info = again.info(sid)
    assert info.pending_publication and "did not publish" in info.pending_publication
    assert info.settled_turns == 1  # the committed state, until the retry
    with pytest.raises(PublicationPending):
        await again.turns.begin_turn(sid, "blocked until retry or abandon")
    result = await again.sessions.retry_publication(sid)
    assert result.committed
    info = again.info(sid)
    assert info.pending_publication is None and info.settled_turns == 2
    saved = await committed(LocalTarget(root), sid)
    assert saved.sidecar.total_turn_count == 2
    assert "the pending turn" in saved.sidecar.latest_user_message
    assert not pending_dir(root, sid).exists()
    await one_turn(again, sid, "third")  # the session works on
    assert (await committed(LocalTarget(root), sid)).sidecar.total_turn_count == 3
    await again.sessions.close(sid)


async def test_abandoning_after_a_restart_keeps_the_committed_state_and_removes_the_record(root):
    first = FaultInjectingTarget(LocalTarget(root))
    sid = await failed_second_turn(first, SessionService(first, ME))
    again = SessionService(LocalTarget(root), ME)
    await again.sessions.open(sid)
    assert await again.sessions.abandon_publication(sid)
    assert again.info(sid).pending_publication is None
    assert not pending_dir(root, sid).exists()
    await one_turn(again, sid, "after abandoning")
    saved = await committed(LocalTarget(root), sid)
    assert saved.sidecar.total_turn_count == 2 and "after abandoning" in saved.sidecar.latest_user_message
    await again.sessions.close(sid)


async def test_another_client_taking_over_is_offered_the_retry_with_who_left_it(root):
    first = FaultInjectingTarget(LocalTarget(root))
    sid = await failed_second_turn(first, SessionService(first, ME, lease_seconds=1))
    for _ in ticks():
        if (await observe_lease(LocalTarget(root), sid)).standing is LeaseStanding.EXPIRED:
            break
        await asyncio.sleep(0.05)
    other = SessionService(LocalTarget(root), OTHER)
    await other.sessions.open(sid, confirm_takeover=True)
    assert "workstation" in other.info(sid).pending_publication
    await other.sessions.retry_publication(sid)
    assert (await committed(LocalTarget(root), sid)).sidecar.total_turn_count == 2
    await other.sessions.close(sid)


async def test_a_retry_that_committed_before_its_cleanup_leaves_nothing_pending(root):
    target = FaultInjectingTarget(LocalTarget(root))
    svc = SessionService(target, ME)
    sid = (await svc.sessions.create()).session_id
    await one_turn(svc, sid, "first")
    await svc.turns.begin_turn(sid, "second")
    target.arm(3, "error")
    with pytest.raises(PublicationFailed):
        await svc.turns.settle(sid)
    # The retry commits; the record's removal then fails (the target drops).
    original_remove = svc.session(sid)._remove_record

    async def failing_remove(pending_id: str) -> None:
        target.arm(1, "error")
        await original_remove(pending_id)

    svc.session(sid)._remove_record = failing_remove
    assert (await svc.sessions.retry_publication(sid)).committed
    assert pending_dir(root, sid).is_dir()  # the trace of the cleanup that stopped
    await svc.sessions.detach()
    again = SessionService(LocalTarget(root), ME)
    await again.sessions.open(sid)
    assert again.info(sid).pending_publication is None
    assert not pending_dir(root, sid).exists()
    assert again.info(sid).settled_turns == 2
    await again.sessions.close(sid)


async def test_over_ssh_a_restarted_client_retries_what_was_pending(ssh_connect, tmp_path):
    ssh_target = await ssh_connect(tmp_path)
    first = FaultInjectingTarget(ssh_target)
    sid = await failed_second_turn(first, SessionService(first, ME))
    assert (tmp_path / ".mevedel" / "sessions" / sid / ".pending-publication").is_dir()
    again = SessionService(ssh_target, ME)
    await again.sessions.open(sid)
    assert again.info(sid).pending_publication
    await again.sessions.retry_publication(sid)
    assert (await committed(ssh_target, sid)).sidecar.total_turn_count == 2
    assert not (tmp_path / ".mevedel" / "sessions" / sid / ".pending-publication").exists()
    await again.sessions.close(sid)


async def test_an_agents_task_and_its_registry_result_publish_together_or_wait_together_for_the_retry(root):
    """A retained agent's settled task (its own transcript) and its result
    in the registry (the sidecar) are one batch: a publication that fails
    mid-way commits neither, leaves one retryable pending publication, and
    its retry commits both."""
    import msgspec

    from mevedel_server.store.content.sidecar import AgentResult, RetainedAgent

    target = FaultInjectingTarget(LocalTarget(root))
    svc = SessionService(target, ME)
    sid = (await svc.sessions.create()).session_id
    started = await svc.turns.begin_turn(sid, "delegate")
    agent = RetainedAgent(path="reviewer", agent="codex", fingerprint="a" * 64, machine="here", created_turn=started.turn,
                          created_turn_id=started.turn_id)
    svc.agents.set_retained_agents(sid, [agent])
    await svc.turns.checkpoint(sid)
    settled = msgspec.structs.replace(agent, result=AgentResult(turn=1, outcome="completed", text="Two issues."))
    svc.agents.set_retained_agents(sid, [settled])
    svc.agents.append_agent_task(sid, "reviewer", "codex", "Review", [EvidenceInput("response", text="Two issues.")], "completed")
    target.arm(3, "error")  # inside the publication program
    with pytest.raises(PublicationFailed):
        await svc.turns.settle(sid)
    before = await committed(LocalTarget(root), sid)
    assert before.agent_tasks("reviewer") == () and before.sidecar.agents[0].result is None
    await svc.sessions.detach()

    again = SessionService(LocalTarget(root), ME)
    await again.sessions.open(sid)
    assert again.info(sid).pending_publication
    await again.sessions.retry_publication(sid)
    after = await committed(LocalTarget(root), sid)
    assert [task.prompt for task in after.agent_tasks("reviewer")] == ["Review"]
    assert after.sidecar.agents[0].result.text == "Two issues."
    await again.sessions.close(sid)


async def test_a_record_removed_between_the_listing_and_its_read_is_nothing_pending(root):
    """The releasing owner removes its record in the program that releases,
    while the requester's claim may have listed it a moment before: a
    marker gone by the time it is read was removed (the marker goes first),
    so nothing is pending -- not a record that can only be abandoned."""
    target = LocalTarget(root)
    paths = SessionPaths("2026-12-06T00-00-0123456789ab")
    marker = root / paths.inside(".pending-publication") / f"pending-{'a' * 32}.json"
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    listed = (await target.run(ControlProgram([pending_listing(paths)])))[0]
    marker.unlink()
    found = await find_pending(target, paths, listed=listed)
    assert found.pending_id is None and found.problem is None, found
