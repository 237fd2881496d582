"""Save As: a named copy of the committed publication under a fresh
identity; the parent is never touched."""

from __future__ import annotations

import pytest
from txn_sessions import ME, committed_view, open_session, read_committed_head

from mevedel_server.store import (
    LeaseStanding,
    StoreError,
    observe_lease,
    read_committed,
)
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.transactions.lifecycle_token import (
    LifecycleRefused,
    StaleState,
)
from mevedel_server.store.transactions.save_as import commit_save_as, prepare_save_as
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, TargetError


async def parent(root):
    s = await open_session(root, name="Parent", settings={"mode": "edit"}, attached_artifacts=("doc-1",))
    await s.turn("one", {"a.txt": b"a1\n"})
    s.conversation.clear(at=s.at + 1)
    await s.turn("two")
    return s


async def test_the_copy_has_a_fresh_identity_an_explicit_name_and_everything_else(tmp_path):
    s = await parent(tmp_path)
    head = s.lease.publication_head
    impact = await prepare_save_as(s.target, s.session_id, "  The   copy ")
    assert (impact.name, impact.turns, impact.segments, impact.chats) == ("The copy", 2, 2, 2)
    assert impact.artifacts > 0 and impact.size > 0
    child = await commit_save_as(s.target, impact.token, ME)
    assert child.session_id != s.session_id and child.lease is None
    sidecar = child.conversation.sidecar
    assert sidecar.display_name == "The copy" and sidecar.naming_state.value == "explicit"
    assert sidecar.naming_input is None
    assert [c.last_segment for c in sidecar.chapters] == [1]
    assert sidecar.settings == {"mode": "edit"} and sidecar.attached_artifacts == ["doc-1"]
    assert await committed_view(tmp_path, child.session_id) == (2, ["one", "two"])
    assert [r.turn for r in child.conversation.file_snapshots()] == [1]
    assert all(child.conversation.records(n)[0].session_id == child.session_id for n in (1, 2))
    # The parent is unchanged and still ours.
    assert await read_committed_head(tmp_path, s.session_id) == head
    assert await committed_view(tmp_path, s.session_id) == (2, ["one", "two"])
    # The child's lease was released, and one publication is its history.
    observed = await observe_lease(LocalTarget(tmp_path), child.session_id)
    assert observed.standing is LeaseStanding.FREE
    pubs = tmp_path / ".mevedel" / "sessions" / child.session_id / ".publications"
    assert len(list(pubs.iterdir())) == 1
    assert not (pubs.parent / ".recovery").exists() and not (pubs.parent / "local").exists()
    snapshot = await read_committed(LocalTarget(tmp_path), child.session_id)
    assert Conversation.restore(await snapshot.read_all()).sidecar == sidecar


async def test_a_moved_parent_is_stale_and_creates_nothing(tmp_path):
    s = await parent(tmp_path)
    impact = await prepare_save_as(s.target, s.session_id, "Copy")
    await s.turn("three")
    with pytest.raises(StaleState, match="committed head moved"):
        await commit_save_as(s.target, impact.token, ME)
    assert [p.name for p in (tmp_path / ".mevedel" / "sessions").iterdir()] == [s.session_id]


async def test_bad_names_and_turns_in_flight_are_refused(tmp_path):
    s = await parent(tmp_path)
    with pytest.raises(LifecycleRefused, match="may not be empty"):
        await prepare_save_as(s.target, s.session_id, "   ")
    s.conversation.begin_turn("three", at=s.at + 1)
    with pytest.raises(LifecycleRefused, match="in flight"):
        await prepare_save_as(s.target, s.session_id, "Copy", live=s.conversation)


async def test_a_failure_before_the_childs_commit_leaves_no_child(tmp_path):
    s = await parent(tmp_path)
    head = s.lease.publication_head
    flaky = FaultInjectingTarget(LocalTarget(tmp_path))
    impact = await prepare_save_as(flaky, s.session_id, "Copy")
    failures = 0
    for point in range(1, 40):
        flaky.arm(point, "error")
        try:
            child = await commit_save_as(flaky, impact.token, ME)
        except (StoreError, TargetError):
            failures += 1
            # No committed child is visible; the parent is untouched.
            # No child is left behind; the parent is untouched.
            sessions = sorted(p.name for p in (tmp_path / ".mevedel" / "sessions").iterdir())
            assert sessions == [s.session_id], point
            assert await read_committed_head(tmp_path, s.session_id) == head
            continue
        assert flaky.fired is False or child.warning is not None
        break
    assert failures >= 4
