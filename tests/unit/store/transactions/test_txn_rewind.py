"""Rewind: both boundaries, the impact, the commit's effects, stale tokens,
refusals, rollback and the recovery marker."""

from __future__ import annotations

import errno
import os

import pytest
from txn_sessions import (
    DELETE,
    ME,
    committed_view,
    git,
    init_repo,
    open_session,
    read,
    read_committed_head,
    reopen,
    snapshot_files,
    write,
)

from mevedel_server.store import Publisher, acquire_lease, read_committed
from mevedel_server.store.authority.lease import ClientIdentity
from mevedel_server.store.content.transcript import Outcome, Response
from mevedel_server.store.errors import StoreError
from mevedel_server.store.transactions.in_place import RolledBack
from mevedel_server.store.transactions.lifecycle_token import (
    InvalidToken,
    LifecycleRefused,
    StaleState,
    StateToken,
)
from mevedel_server.store.transactions.recovery import (
    RecoveryPending,
    RecoveryRequired,
    abandon_recovery,
    find_recovery,
    retry_recovery,
)
from mevedel_server.store.transactions.rewind import commit_rewind, prepare_rewind
from mevedel_server.store.transactions.snapshot_cut import Boundary
from mevedel_server.targets import (
    ControlProgram,
    FaultInjectingTarget,
    LocalTarget,
    ProgramTarget,
    TargetError,
    executor,
)

FILES = ("a.txt", "b.txt", "src/c.txt")


async def three_turns(root, **kwargs):
    """a.txt: a0 -> a1 -> a2; b.txt: absent -> b2 -> removed; c: gap at 3."""
    write(root, "a.txt", b"a0\n")
    s = await open_session(root, **kwargs)
    await s.turn("one", {"a.txt": b"a1\n"})
    await s.turn("two", {"a.txt": b"a2\n", "b.txt": b"b2\n"})
    await s.turn("three", {"b.txt": DELETE, "src/c.txt": b"c3\n"}, gaps={"d.txt": "ran a shell command"})
    return s


def restored(impact) -> dict:
    return {r.path: (r.state, r.checkpoint, r.turn, r.changes) for r in impact.restores}


async def test_before_a_prompt_discards_it_and_restores_pre_turn_content(tmp_path):
    s = await three_turns(tmp_path)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    assert [d.preview for d in impact.discarded] == ["two", "three"]
    assert [d.turn for d in impact.discarded] == [2, 3]
    assert impact.discarded[0].label == "turn 2 (segment 1): two"
    assert impact.kept_turns == 1
    assert restored(impact) == {
        "a.txt": ("present", "pre-turn", 2, True),
        "b.txt": ("absent", "pre-turn", 2, False),
        "src/c.txt": ("absent", "pre-turn", 3, True),
    }
    assert [(g.path, g.turn, g.reason) for g in impact.gaps] == [("d.txt", 3, "ran a shell command")]
    assert not impact.coverage_complete and not impact.empty
    assert impact.git.status == "no-repository"

    result = await commit_rewind(s.publisher, impact.token)
    assert result.committed and sorted(result.written) == ["a.txt", "src/c.txt"]
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a1\n", "b.txt": None, "src/c.txt": None}
    assert await committed_view(tmp_path, s.session_id) == (1, ["one"])
    assert not (await find_recovery(s.target, s.session_id)).pending


async def test_after_a_response_keeps_it_and_restores_its_post_turn_content(tmp_path):
    s = await three_turns(tmp_path)
    # The working tree drifted from turn 2's recorded result before turn 3.
    impact = await prepare_rewind(s.target, s.session_id, Boundary.after(2))
    assert [d.preview for d in impact.discarded] == ["three"]
    assert restored(impact) == {
        "a.txt": ("present", "post-turn", 2, False),
        "b.txt": ("present", "post-turn", 2, True),
        "src/c.txt": ("absent", "pre-turn", 3, True),
    }
    await commit_rewind(s.publisher, impact.token)
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a2\n", "b.txt": b"b2\n", "src/c.txt": None}
    assert await committed_view(tmp_path, s.session_id) == (2, ["one", "two"])


async def test_before_the_first_prompt_empties_the_session(tmp_path):
    s = await three_turns(tmp_path, name="Kept name")
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(1))
    assert [d.turn for d in impact.discarded] == [1, 2, 3] and impact.kept_turns == 0
    result = await commit_rewind(s.publisher, impact.token)
    assert await committed_view(tmp_path, s.session_id) == (0, [])
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a0\n", "b.txt": None, "src/c.txt": None}
    sidecar = result.conversation.sidecar
    assert sidecar.session_id == s.session_id and sidecar.display_name == "Kept name"
    assert sidecar.first_user_message is None and sidecar.file_snapshot_count == 0
    # The emptied session takes a new first turn.
    s.adopt(result.conversation)
    await s.turn("again", {"a.txt": b"fresh\n"})
    assert await committed_view(tmp_path, s.session_id) == (1, ["again"])


async def test_after_the_latest_response_with_nothing_changed_is_an_empty_impact(tmp_path):
    s = await three_turns(tmp_path)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.after(3))
    assert impact.empty and impact.discarded == () and not impact.transcript_changes
    assert all(not r.changes for r in impact.restores)
    head = s.lease.publication_head
    result = await commit_rewind(s.publisher, impact.token)
    # Nothing is published and nothing written.
    assert not result.committed and result.written == () and result.head == head
    assert await read_committed_head(tmp_path, s.session_id) == head
    # A file drifting from turn 3's result makes the same boundary non-empty.
    write(tmp_path, "src/c.txt", b"drifted\n")
    impact = await prepare_rewind(s.target, s.session_id, Boundary.after(3))
    assert not impact.empty and not impact.transcript_changes
    result = await commit_rewind(s.publisher, impact.token)
    assert result.committed and result.written == ("src/c.txt",) and read(tmp_path, "src/c.txt") == b"c3\n"
    assert await committed_view(tmp_path, s.session_id) == (3, ["one", "two", "three"])


async def test_after_the_latest_response_before_a_compaction_is_not_empty(tmp_path):
    s = await three_turns(tmp_path)
    s.conversation.rotate_segment("summary", at=s.at + 1)
    await s.save()
    impact = await prepare_rewind(s.target, s.session_id, Boundary.after(3))
    assert impact.discarded == () and impact.transcript_changes and not impact.empty
    result = await commit_rewind(s.publisher, impact.token)
    assert result.committed and result.conversation.sidecar.current_segment == 1


async def test_externally_modified_files_are_named_and_overwritten(tmp_path):
    s = await three_turns(tmp_path)
    # Turn 3 removed b.txt; someone recreated it by hand since.
    write(tmp_path, "b.txt", b"recreated by hand\n")
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(3))
    assert [(e.path, e.recorded_turn) for e in impact.externally_modified] == [("b.txt", 3)]
    assert restored(impact)["b.txt"] == ("present", "pre-turn", 3, True)
    await commit_rewind(s.publisher, impact.token)
    assert read(tmp_path, "b.txt") == b"b2\n"


async def test_external_change_to_a_restored_file_is_reported(tmp_path):
    s = await three_turns(tmp_path)
    write(tmp_path, "src/c.txt", b"changed after turn three\n")
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(3))
    assert [(e.path, e.recorded_turn) for e in impact.externally_modified] == [("src/c.txt", 3)]
    await commit_rewind(s.publisher, impact.token)
    assert read(tmp_path, "src/c.txt") is None


async def test_git_index_divergence_against_a_real_repository(tmp_path):
    init_repo(tmp_path)
    s = await three_turns(tmp_path)
    # Stage the current a.txt and c.txt; b.txt is not in the index.
    git(tmp_path, "add", "a.txt", "src/c.txt")
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    assert impact.git.status == "checked"
    divergent = {d.path: d for d in impact.git.divergent}
    assert sorted(divergent) == ["a.txt", "src/c.txt"]
    assert divergent["src/c.txt"].restored_blob is None  # the restore removes it
    probe = tmp_path.parent / f"{tmp_path.name}-probe"
    probe.write_bytes(b"a1\n")
    assert divergent["a.txt"].restored_blob == git(tmp_path, "hash-object", str(probe))
    # Git HEAD and the index are not changed by the commit.
    await commit_rewind(s.publisher, impact.token)
    assert git(tmp_path, "ls-files", "-s", "a.txt").split()[1] == divergent["a.txt"].index_blob


async def test_index_matching_the_restored_content_is_not_divergent(tmp_path):
    init_repo(tmp_path)
    s = await three_turns(tmp_path)
    write(tmp_path, "a.txt", b"a1\n")
    git(tmp_path, "add", "a.txt")
    write(tmp_path, "a.txt", b"a2\n")
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    assert [d.path for d in impact.git.divergent] == []


async def test_compaction_and_clear_boundaries(tmp_path):
    s = await open_session(tmp_path)
    await s.turn("one")
    s.conversation.rotate_segment("summary of one", at=s.at + 1)
    await s.turn("two")
    s.conversation.clear(at=s.at + 1)
    await s.turn("three")
    # After turn 1: segment 1 becomes live again (the compaction is undone).
    impact = await prepare_rewind(s.target, s.session_id, Boundary.after(1))
    sidecar_before = s.conversation.sidecar
    assert sidecar_before.current_segment == 3 and len(sidecar_before.chapters) == 1
    result = await commit_rewind(s.publisher, impact.token)
    assert result.conversation.sidecar.current_segment == 1 and result.conversation.sidecar.chapters == []
    assert await committed_view(tmp_path, s.session_id) == (1, ["one"])
    # Before turn 3 (first prompt after a /clear): the cleared chat stays closed.
    s2 = await open_session(tmp_path / "other")
    await s2.turn("one")
    s2.conversation.clear(at=s2.at + 1)
    await s2.turn("two")
    impact = await prepare_rewind(s2.target, s2.session_id, Boundary.before(2))
    result = await commit_rewind(s2.publisher, impact.token)
    assert result.conversation.sidecar.current_segment == 2
    assert [c.last_segment for c in result.conversation.sidecar.chapters] == [1]
    s2.adopt(result.conversation)
    await s2.turn("two again")
    assert await committed_view(tmp_path / "other", s2.session_id) == (2, ["one", "two again"])


async def test_local_settings_and_attachments_survive(tmp_path):
    s = await three_turns(tmp_path)
    local = tmp_path / ".mevedel" / "sessions" / s.session_id / "local"
    (local / "plans").mkdir(parents=True)
    (local / "plans" / "current.md").write_text("draft")
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(1))
    await commit_rewind(s.publisher, impact.token)
    assert (local / "plans" / "current.md").read_text() == "draft"


async def test_an_interrupted_kept_turn_keeps_the_reconciliation_reminder(tmp_path):
    s = await open_session(tmp_path)
    await s.turn("one", outcome=Outcome.INTERRUPTED)
    await s.turn("two")
    assert not s.conversation.sidecar.reconciliation_pending
    impact = await prepare_rewind(s.target, s.session_id, Boundary.after(1))
    result = await commit_rewind(s.publisher, impact.token)
    assert result.conversation.sidecar.reconciliation_pending


# Stale tokens and refusals ------------------------------------------------------


async def test_a_new_head_after_prepare_is_stale(tmp_path):
    s = await three_turns(tmp_path)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    await s.turn("four")
    with pytest.raises(StaleState, match="committed head moved"):
        await commit_rewind(s.publisher, impact.token)
    assert await committed_view(tmp_path, s.session_id) == (4, ["one", "two", "three", "four"])


async def test_a_file_changed_after_prepare_is_stale_and_nothing_is_written(tmp_path):
    s = await three_turns(tmp_path)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    write(tmp_path, "b.txt", b"appeared\n")
    with pytest.raises(StaleState, match="b.txt was created"):
        await commit_rewind(s.publisher, impact.token.text)
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a2\n", "b.txt": b"appeared\n", "src/c.txt": b"c3\n"}
    assert await committed_view(tmp_path, s.session_id) == (3, ["one", "two", "three"])


async def test_another_clients_generation_is_stale(tmp_path):
    s = await three_turns(tmp_path)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    await s.lease.release()
    other = ClientIdentity("other-client", "laptop")
    taken = await acquire_lease(LocalTarget(tmp_path), s.session_id, other, duration_seconds=60)
    with pytest.raises(StaleState, match="lease moved"):
        await commit_rewind(Publisher(taken), impact.token)
    assert snapshot_files(tmp_path, FILES)["a.txt"] == b"a2\n"


async def test_renewals_of_the_same_lease_are_not_a_move(tmp_path):
    s = await three_turns(tmp_path)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(3))
    await s.lease.renew()
    await s.lease.renew()
    result = await commit_rewind(s.publisher, impact.token)
    assert result.committed


async def test_tokens_of_another_transaction_or_garbage_are_refused(tmp_path):
    s = await three_turns(tmp_path)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(3))
    forged = StateToken.make(
        op="redo", session_id=s.session_id, lease_generation=1, lease_client=None, head=None, at=0, subject={}, files={}
    )
    with pytest.raises(InvalidToken, match="prepared for redo"):
        await commit_rewind(s.publisher, forged)
    with pytest.raises(InvalidToken):
        await commit_rewind(s.publisher, "not a token")
    with pytest.raises(InvalidToken):
        await commit_rewind(s.publisher, impact.token.text[:-3] + "!!!")


async def test_refused_while_a_turn_is_in_flight(tmp_path):
    s = await three_turns(tmp_path)
    turn_id = s.conversation.begin_turn("four", at=s.at + 1)
    with pytest.raises(LifecycleRefused, match="turn 4 is in flight"):
        await prepare_rewind(s.target, s.session_id, Boundary.before(2), live=s.conversation)
    # A checkpoint of the unfinished turn: the committed state is mid-turn.
    s.conversation.append(Response(turn_id=turn_id, text="partial"))
    candidate = s.conversation.checkpoint()
    await s.publisher.publish(candidate.changed)
    with pytest.raises(LifecycleRefused, match="in flight"):
        await prepare_rewind(s.target, s.session_id, Boundary.before(2))


async def test_a_boundary_that_does_not_exist_is_refused(tmp_path):
    s = await three_turns(tmp_path)
    for boundary in (Boundary.after(4), Boundary.before(0), Boundary.after(0)):
        with pytest.raises(LifecycleRefused, match="no settled turn"):
            await prepare_rewind(s.target, s.session_id, boundary)


async def test_a_link_put_where_a_captured_file_was_is_replaced_never_followed(tmp_path):
    s = await three_turns(tmp_path)
    (tmp_path / "src" / "c.txt").unlink()
    (tmp_path / "src" / "c.txt").symlink_to(tmp_path / "a.txt")
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    assert [r.action for r in impact.restores if r.path == "src/c.txt"] == ["delete"]
    await commit_rewind(s.publisher, impact.token)
    assert not os.path.lexists(tmp_path / "src" / "c.txt")


# Failures before the commit point --------------------------------------------------


async def test_an_injected_failure_at_every_write_rolls_back_or_commits(tmp_path):
    """Error mode at every write index: the files and the committed state
    are both old (rolled back, no recovery left) or both new."""
    baseline = tmp_path / "baseline"
    fault = FaultInjectingTarget(LocalTarget(_mk(baseline)))
    s = await three_turns(baseline, target=fault)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    fault.arm(None)
    await commit_rewind(s.publisher, impact.token)
    total = fault.writes
    outcomes = {"old": 0, "new": 0, "cleanup": 0}
    for point in range(1, total + 1):
        root = tmp_path / f"fail-{point}"
        fault = FaultInjectingTarget(LocalTarget(_mk(root)))
        s = await three_turns(root, target=fault)
        old_files = snapshot_files(root, FILES)
        impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
        fault.arm(point, "error")
        result = None
        try:
            result = await commit_rewind(s.publisher, impact.token)
        except Exception as error:
            assert not isinstance(error, RecoveryRequired), f"point {point}: {error}"
        committed = result is not None
        view = await committed_view(root, s.session_id)
        files = snapshot_files(root, FILES)
        if view == (1, ["one"]):
            assert files == {"a.txt": b"a1\n", "b.txt": None, "src/c.txt": None}, point
            outcomes["new"] += 1
        else:
            assert view == (3, ["one", "two", "three"]) and not committed, point
            assert files == old_files, point
            assert s.publisher.pending is None
            outcomes["old"] += 1
        state = await find_recovery(LocalTarget(root), s.session_id)
        if state.pending:
            # Only a failure after the commit point leaves the record: the
            # result says so, and retrying finishes in the new direction.
            assert committed and result.warning and "retry the recovery" in result.warning, point
            assert (await retry_recovery(s.lease)).resolution == "completed"
            outcomes["cleanup"] += 1
        assert not (await find_recovery(LocalTarget(root), s.session_id)).pending, point
    assert outcomes["old"] >= 3 and total >= 5


def _mk(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


class Sabotage(ProgramTarget):
    """Drops the connection in the publication's program as it reaches
    the manifest (what came before it -- the restored files -- is done),
    then fails every write to ``path``."""

    def __init__(self, inner, path: str) -> None:
        self.inner = inner
        self.path = path
        self.armed = False
        self.broken = False
        #: What else happens on the host as the connection drops.
        self.meanwhile = None

    async def run(self, program):
        ops = program.operations
        writes = [op for op in ops if op.writes]
        manifest = next((i for i, op in enumerate(ops) if "/.publications/" in op.path and op.path.endswith("manifest.json")), None)
        if self.armed and manifest is not None:
            self.broken = True
            await self.inner.run(ControlProgram(ops[:manifest]))
            if self.meanwhile is not None:
                self.meanwhile()
            raise TargetError(".publications", "the connection dropped")
        if self.broken and any(op.path == self.path for op in writes):
            raise TargetError(self.path, "permission denied")
        return await self.inner.run(program)


async def rollback_failed(tmp_path, sabotage: Sabotage):
    """Three turns through ``sabotage``, then a Rewind it stops and whose
    rollback fails: the session, and the RecoveryRequired it raised."""
    s = await three_turns(tmp_path, target=sabotage)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    sabotage.armed = True
    with pytest.raises(RecoveryRequired) as caught:
        await commit_rewind(s.publisher, impact.token)
    return s, caught.value


async def test_an_incomplete_rollback_leaves_a_marker_that_blocks_until_retried(tmp_path):
    sabotage = Sabotage(LocalTarget(tmp_path), "a.txt")
    s, error = await rollback_failed(tmp_path, sabotage)
    assert "a.txt" in error.failed and error.kind == "recovery-pending"
    # The rollback program (a.txt with c.txt) failed: both stay restored.
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a1\n", "b.txt": None, "src/c.txt": None}
    assert await committed_view(tmp_path, s.session_id) == (3, ["one", "two", "three"])
    state = await find_recovery(LocalTarget(tmp_path), s.session_id)
    assert state.recovery_id == error.recovery_id and state.marker is not None
    assert state.marker.operation == "rewind"
    # The marker blocks every later lifecycle transaction, across clients.
    with pytest.raises(RecoveryPending):
        await prepare_rewind(LocalTarget(tmp_path), s.session_id, Boundary.before(3))
    # A new process of the same client (the lease stays) retries.
    sabotage.armed = sabotage.broken = False
    again = await reopen(s, LocalTarget(tmp_path))
    outcome = await retry_recovery(again.lease)
    assert outcome.resolution == "rolled-back" and sorted(outcome.written) == ["a.txt", "src/c.txt"]
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a2\n", "b.txt": None, "src/c.txt": b"c3\n"}
    assert not (await find_recovery(LocalTarget(tmp_path), s.session_id)).pending
    assert not (tmp_path / ".mevedel" / "sessions" / s.session_id / ".recovery").exists()
    impact = await prepare_rewind(again.target, s.session_id, Boundary.before(2))
    await commit_rewind(again.publisher, impact.token)
    assert await committed_view(tmp_path, s.session_id) == (1, ["one"])


async def test_a_retried_recovery_leaves_a_file_edited_since_the_rollback_failed(tmp_path):
    """The rollback of a Rewind failed and left its marker; the user then
    edited a file the Rewind had written: the retry puts back the file that
    still holds what the Rewind wrote, leaves the edited one as it is, says
    so, and ends the recovery."""
    sabotage = Sabotage(LocalTarget(tmp_path), "a.txt")
    s, error = await rollback_failed(tmp_path, sabotage)
    write(tmp_path, "src/c.txt", b"mine\n")
    sabotage.armed = sabotage.broken = False
    again = await reopen(s, LocalTarget(tmp_path))
    outcome = await retry_recovery(again.lease)
    assert outcome.resolution == "rolled-back" and outcome.written == ("a.txt",) and outcome.left == ("src/c.txt",)
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a2\n", "b.txt": None, "src/c.txt": b"mine\n"}
    assert not (await find_recovery(LocalTarget(tmp_path), s.session_id)).pending


class SabotageUnseen(Sabotage):
    """Sabotage, and once broken the recovery marker cannot be looked at."""

    async def run(self, program):
        if self.broken and any("/.recovery/recovery-" in op.path and not op.writes for op in program.operations):
            raise TargetError(".recovery", "reading it was refused")
        return await super().run(program)


async def test_an_incomplete_rollback_whose_marker_cannot_be_looked_at_names_it_only_as_one_that_may_be_left(tmp_path):
    sabotage = SabotageUnseen(LocalTarget(tmp_path), "a.txt")
    s, error = await rollback_failed(tmp_path, sabotage)
    message = str(error)
    rid = error.recovery_id
    assert f"Recovery {rid} may be left (whether it is could not be read: " in message and "keeps" not in message
    assert message.endswith("retry the recovery: it finishes or undoes what is left, or says that nothing is")
    # It is there here: the retry finishes it.
    assert (await find_recovery(LocalTarget(tmp_path), s.session_id)).recovery_id == rid


async def test_abandoning_a_recovery_keeps_the_files_and_unblocks(tmp_path):
    sabotage = Sabotage(LocalTarget(tmp_path), "a.txt")
    s, _ = await rollback_failed(tmp_path, sabotage)
    sabotage.armed = sabotage.broken = False
    again = await reopen(s, LocalTarget(tmp_path))
    outcome = await abandon_recovery(again.lease)
    assert outcome.resolution == "abandoned"
    assert read(tmp_path, "a.txt") == b"a1\n"  # left as it was
    assert not (await find_recovery(LocalTarget(tmp_path), s.session_id)).pending
    with pytest.raises(LifecycleRefused, match="no recovery"):
        await retry_recovery(again.lease)


async def test_an_abandonment_that_stopped_partway_still_blocks_and_finishes(tmp_path):
    sabotage = Sabotage(LocalTarget(tmp_path), "a.txt")
    s, error = await rollback_failed(tmp_path, sabotage)
    rid = error.recovery_id
    sabotage.armed = sabotage.broken = False
    flaky = FaultInjectingTarget(LocalTarget(tmp_path))
    again = await reopen(s, flaky)
    flaky.arm(2, "error")  # the approval is written, the first removal fails
    with pytest.raises(TargetError):
        await abandon_recovery(again.lease, rid)
    state = await find_recovery(LocalTarget(tmp_path), s.session_id)
    assert state.pending and state.marker is not None and state.marker.abandoning
    with pytest.raises(LifecycleRefused, match="already approved"):
        await retry_recovery(again.lease)
    assert (await abandon_recovery(again.lease)).resolution == "abandoned"
    assert not (await find_recovery(LocalTarget(tmp_path), s.session_id)).pending


async def test_the_replacement_reuses_the_unchanged_bytes_it_keeps(tmp_path):
    s = await three_turns(tmp_path)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.after(2))
    result = await commit_rewind(s.publisher, impact.token)
    snapshot = await read_committed(LocalTarget(tmp_path), s.session_id)
    assert snapshot.head == result.head
    new_directory = result.head.rsplit("/", 1)[0]
    history = {p: e for p, e in snapshot.manifest.entries.items() if p.startswith("file-history/")}
    assert history and all(not e.published.startswith(new_directory + "/") for e in history.values())
    # A fresh reader restores exactly the conversation the commit handed back.
    from mevedel_server.store.content.turns import Conversation

    fresh = Conversation.restore(await snapshot.read_all())
    assert fresh.prompt_index() == result.conversation.prompt_index()
    assert fresh.file_snapshots() == result.conversation.file_snapshots()
    assert ME.client_id == s.lease.record.client_id


async def test_a_marker_naming_paths_outside_the_project_is_not_retried(tmp_path):
    sabotage = Sabotage(LocalTarget(tmp_path), "a.txt")
    s, error = await rollback_failed(tmp_path, sabotage)
    marker = tmp_path / ".mevedel" / "sessions" / s.session_id / ".recovery" / f"recovery-{error.recovery_id}.json"
    marker.write_bytes(marker.read_bytes().replace(b'"path":"a.txt"', b'"path":".mevedel/workspace-id"'))
    sabotage.armed = sabotage.broken = False
    again = await reopen(s, LocalTarget(tmp_path))
    with pytest.raises(LifecycleRefused, match="not project files"):
        await retry_recovery(again.lease)
    assert (tmp_path / ".mevedel" / "workspace-id").read_bytes().startswith(b"{")


async def test_restored_files_that_cannot_be_flushed_roll_the_rewind_back(tmp_path, monkeypatch):
    """The restored files share one flush before the replacement is
    published; a disk that refuses it fails the Rewind before its commit."""
    s = await three_turns(tmp_path)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    real = executor.sync_filesystem
    calls = []

    def first_flush_fails(fd):
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd)

    monkeypatch.setattr(executor, "sync_filesystem", first_flush_fails)
    with pytest.raises(StoreError, match="not flushed to disk: Input/output error") as caught:
        await commit_rewind(s.publisher, impact.token)
    # The refusal says the Rewind did not happen and the files were put back.
    assert isinstance(caught.value, RolledBack) and "the rewind did not happen" in str(caught.value)
    assert "every project file it had written was put back, so the session and its files are as they were" in str(caught.value)
    # Rolled back (with a flush that worked) and nothing committed.
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a2\n", "b.txt": None, "src/c.txt": b"c3\n"}
    assert await committed_view(tmp_path, s.session_id) == (3, ["one", "two", "three"])
    assert not (await find_recovery(s.target, s.session_id)).pending


async def test_a_connection_lost_at_the_commit_is_told_as_rolled_back(tmp_path):
    """The files were restored, the publication's connection dropped, and
    the rollback worked: the user is told it did not happen (kind
    ``unavailable``), not only that an answer was lost."""
    sabotage = Sabotage(LocalTarget(tmp_path), "none-of-them")
    s = await three_turns(tmp_path, target=sabotage)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    sabotage.armed = True
    with pytest.raises(RolledBack) as caught:
        await commit_rewind(s.publisher, impact.token)
    assert caught.value.kind == "unavailable" and "the connection dropped" in str(caught.value)
    assert "the rewind did not happen" in str(caught.value)
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a2\n", "b.txt": None, "src/c.txt": b"c3\n"}
    assert not (await find_recovery(LocalTarget(tmp_path), s.session_id)).pending


async def test_a_restored_file_edited_outside_before_the_rollback_is_left_as_it_is(tmp_path):
    """The files were restored, someone edited one of them, then the
    publication's connection dropped: the rollback puts back the file the
    Rewind wrote and still holds what it wrote, leaves the edited one as it
    is, and says so; nothing blocks the session."""
    sabotage = Sabotage(LocalTarget(tmp_path), "none-of-them")
    s = await three_turns(tmp_path, target=sabotage)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    sabotage.armed = True
    sabotage.meanwhile = lambda: (tmp_path / "a.txt").write_bytes(b"theirs\n")
    with pytest.raises(RolledBack) as caught:
        await commit_rewind(s.publisher, impact.token)
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"theirs\n", "b.txt": None, "src/c.txt": b"c3\n"}
    message = str(caught.value)
    assert caught.value.left == ("a.txt",) and message.count(s.session_id) == 1
    assert "every project file it had written was put back except a.txt, changed outside the session meanwhile and left as it is" in message
    assert await committed_view(tmp_path, s.session_id) == (3, ["one", "two", "three"])
    assert not (await find_recovery(LocalTarget(tmp_path), s.session_id)).pending
