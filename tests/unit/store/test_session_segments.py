"""Compaction and /clear through the session service: each rotation is one
publication a fresh reader sees whole, refused while a turn is in flight or
the session is read-only; refusals name the authored input."""

from __future__ import annotations

from pathlib import Path

import pytest

from mevedel_server.store import (
    ClientIdentity,
    PublicationFailed,
    PublicationPending,
    read_committed,
)
from mevedel_server.store.content.transcript import (
    SegmentClose,
    SegmentClosing,
    Summary,
)
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.service import (
    EvidenceInput,
    InvalidSessionInput,
    SessionChange,
    SessionConflict,
    SessionReadOnly,
    SessionService,
    TurnStateConflict,
    error_kind,
)
from mevedel_server.targets import FaultInjectingTarget, LocalTarget

ME = ClientIdentity("client-me", "workstation")
OTHER = ClientIdentity("client-other", "laptop")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


async def with_turn(svc: SessionService, sid: str, prompt: str) -> None:
    await svc.turns.begin_turn(sid, prompt)
    await svc.turns.append(sid, EvidenceInput("response", text=f"answer to {prompt}"))
    await svc.turns.settle(sid)


async def fresh_reader(root: Path, sid: str) -> Conversation:
    snapshot = await read_committed(LocalTarget(root), sid)
    return Conversation.restore(await snapshot.read_all())


async def test_compact_commits_a_new_segment_that_starts_with_the_summary(root):
    svc = SessionService(LocalTarget(root), ME)
    changes: list[SessionChange] = []
    svc.on_change.append(changes.append)
    sid = (await svc.sessions.create("Compacted")).session_id
    await with_turn(svc, sid, "first question")
    head_before = (await read_committed(LocalTarget(root), sid)).head

    rotation = await svc.turns.compact(sid, "We talked about the first question.")
    assert (rotation.previous_segment, rotation.segment, rotation.chapter) == (1, 2, None)
    assert rotation.save.committed and rotation.save.head != head_before
    assert (changes[-1].reason, changes[-1].display_name) == ("compacted", "Compacted")

    reader = await fresh_reader(root, sid)
    assert reader.current_segment == 2 and reader.sidecar.current_segment == 2
    closed = reader.records(1)[-1]
    assert isinstance(closed, SegmentClose) and closed.reason is SegmentClosing.COMPACTION
    summary = reader.records(2)[1]
    assert isinstance(summary, Summary) and summary.summarized_segment == 1
    assert summary.text == "We talked about the first question."
    # The conversation continues in the new segment.
    await with_turn(svc, sid, "second question")
    assert [(t.turn, t.segment) for t in await svc.turns.summaries(sid)] == [(1, 1), (2, 2)]


async def test_clear_closes_a_chapter_and_keeps_an_explicit_name(root):
    svc = SessionService(LocalTarget(root), ME)
    changes: list[SessionChange] = []
    svc.on_change.append(changes.append)
    sid = (await svc.sessions.create("Kept name")).session_id
    await with_turn(svc, sid, "before the clear")
    rotation = await svc.turns.clear(sid)
    assert (rotation.previous_segment, rotation.segment, rotation.chapter) == (1, 2, 1)
    assert changes[-1].reason == "cleared"
    reader = await fresh_reader(root, sid)
    assert [c.last_segment for c in reader.sidecar.chapters] == [1]
    assert reader.sidecar.display_name == "Kept name"
    with pytest.raises(TurnStateConflict) as caught:
        await svc.turns.clear(sid)  # the new chat has no turns yet
    assert error_kind(caught.value) == "conflict" and caught.value.session_id == sid
    assert "no turns to clear" in caught.value.said
    with pytest.raises(TurnStateConflict) as caught:
        await svc.turns.compact(sid, "nothing to summarize")
    assert "no turn to compact" in caught.value.said
    assert (await fresh_reader(root, sid)).current_segment == 2  # refusals changed nothing


async def test_rotations_are_refused_while_a_turn_is_in_flight(root):
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    await with_turn(svc, sid, "settled")
    await svc.turns.begin_turn(sid, "still running")
    head = (await read_committed(LocalTarget(root), sid)).head
    for attempt in (svc.turns.compact(sid, "a summary"), svc.turns.clear(sid)):
        with pytest.raises(TurnStateConflict) as caught:
            await attempt
        assert caught.value.session_id == sid
        assert caught.value.said.startswith("has turn 2 in flight; settle or abort it")
        assert str(caught.value).startswith(f"session {sid} has turn 2 in flight")
    assert (await read_committed(LocalTarget(root), sid)).head == head
    assert svc.session(sid).conversation.current_segment == 1


async def test_a_blank_summary_names_the_input(root):
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    await with_turn(svc, sid, "q")
    with pytest.raises(InvalidSessionInput) as caught:
        await svc.turns.compact(sid, "  \n ")
    assert error_kind(caught.value) == "invalid-params"
    assert caught.value.authored == 'summary "  \\n "' and "is blank" in caught.value.reason


async def test_a_joined_session_cannot_be_compacted_or_cleared(root):
    owner = SessionService(LocalTarget(root), OTHER)
    sid = (await owner.sessions.create()).session_id
    await with_turn(owner, sid, "owned elsewhere")
    joiner = SessionService(LocalTarget(root), ME)
    assert (await joiner.sessions.open(sid)).action == "join"
    for attempt in (joiner.turns.compact(sid, "mine"), joiner.turns.clear(sid)):
        with pytest.raises(SessionReadOnly):
            await attempt
    assert (await fresh_reader(root, sid)).current_segment == 1


async def test_a_rotation_that_fails_to_publish_is_pending_and_the_reader_sees_the_old_state(root):
    faults = FaultInjectingTarget(LocalTarget(root))
    svc = SessionService(faults, ME)
    sid = (await svc.sessions.create()).session_id
    await with_turn(svc, sid, "q")
    faults.arm(3, "error")  # inside the rotation's publication program
    with pytest.raises(PublicationFailed):
        await svc.turns.compact(sid, "summary")
    assert (await fresh_reader(root, sid)).current_segment == 1
    with pytest.raises(PublicationPending):
        await svc.turns.clear(sid)
    retried = await svc.sessions.retry_publication(sid)
    assert retried.committed and (await fresh_reader(root, sid)).current_segment == 2


async def test_turn_and_name_refusals_name_the_authored_input(root):
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    for attempt in (svc.turns.abort(sid), svc.turns.settle(sid)):
        with pytest.raises(TurnStateConflict) as caught:
            await attempt
        assert caught.value.session_id == sid and caught.value.said.startswith("has no turn in flight")
        assert str(caught.value).startswith(f"session {sid} has no turn in flight")
    with pytest.raises(InvalidSessionInput) as caught:
        await svc.sessions.rename(sid, "  ")
    assert (caught.value.authored, caught.value.reason) == ('name "  "', "is blank; a session name needs a visible character")
    with pytest.raises(InvalidSessionInput) as caught:
        await svc.turns.begin_turn(sid, "\t")
    assert caught.value.authored == 'prompt "\\t"'
    await svc.turns.begin_turn(sid, "one")
    with pytest.raises(TurnStateConflict) as caught:
        await svc.turns.begin_turn(sid, "two")
    assert caught.value.said == "has turn 1 in flight; settle or abort it before beginning another"


async def test_a_refused_record_names_the_session(root):
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    await svc.turns.begin_turn(sid, "calls a tool")
    await svc.turns.append(sid, EvidenceInput("tool_call", call_id="c1", name="edit", arguments="{}"))
    with pytest.raises(SessionConflict) as caught:
        await svc.turns.append(sid, EvidenceInput("tool_call", call_id="c1", name="edit", arguments="{}"))
    assert (caught.value.session_id, error_kind(caught.value)) == (sid, "conflict")
    assert "tool call c1 was already recorded" in caught.value.said
    with pytest.raises(SessionConflict) as caught:
        await svc.turns.append(sid, EvidenceInput("tool_result", call_id="c9", output="x"))
    assert "c9" in caught.value.said and str(caught.value).startswith(f"session {sid}: ")
