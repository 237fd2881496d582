"""Conversation Fork: the child's content and lineage, local/ copying,
the source left unchanged, stale tokens, and fork-point variants."""

from __future__ import annotations

import os
import shutil

import pytest
from txn_sessions import ME, committed_view, open_session, read_committed_head

from mevedel_server.store import Publisher, acquire_lease, read_committed
from mevedel_server.store.content.sidecar import ForkType
from mevedel_server.store.content.transcript import Outcome, Response
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.transactions.fork import (
    NO_PLAN_RECORD,
    commit_fork,
    prepare_fork,
)
from mevedel_server.store.transactions.lifecycle_token import (
    LifecycleRefused,
    StaleState,
)
from mevedel_server.store.transactions.rewind import commit_rewind, prepare_rewind
from mevedel_server.store.transactions.snapshot_cut import Boundary
from mevedel_server.store.workspace_wide.fork_variants import fork_variants
from mevedel_server.targets import LocalTarget

LATER = 2_000_000_000


async def source_session(root, **kwargs):
    s = await open_session(root, **kwargs)
    await s.turn("one", {"a.txt": b"a1\n"})
    await s.turn("two", {"a.txt": b"a2\n"})
    await s.turn("three")
    return s


def local_dir(root, session_id):
    return root / ".mevedel" / "sessions" / session_id / "local"


async def fork(s, turn, at):
    impact = await prepare_fork(s.target, s.session_id, turn, at=at)
    return impact, await commit_fork(s.target, impact.token, ME)


async def test_the_child_ends_at_the_response_and_records_its_origin(tmp_path):
    s = await source_session(tmp_path, name="Source name")
    source_head = s.lease.publication_head
    impact, result = await fork(s, 2, LATER)
    assert impact.response.preview == "two" and impact.turns == 2
    child = result.child
    assert child.session_id != s.session_id and child.lease is None
    assert await committed_view(tmp_path, child.session_id) == (2, ["one", "two"])
    sidecar = child.conversation.sidecar
    assert sidecar.session_id == child.session_id
    assert sidecar.display_name is None and sidecar.naming_state.value == "pending"
    origin = sidecar.fork
    assert (origin.fork_type, origin.session_id, origin.turn) == (ForkType.CONVERSATION, s.session_id, 2)
    assert origin.fork_point_id == s.conversation.prompt_index()[1].turn_id == impact.fork_point_id
    assert sidecar.created_at == LATER
    # File checkpoints stop at the fork point; the source is unchanged.
    assert [r.turn for r in child.conversation.file_snapshots()] == [1, 2]
    assert await read_committed_head(tmp_path, s.session_id) == source_head
    assert await committed_view(tmp_path, s.session_id) == (3, ["one", "two", "three"])
    # Every kept segment names the child.
    assert child.conversation.records(1)[0].session_id == child.session_id
    # The fresh reader restores the same child.
    snapshot = await read_committed(LocalTarget(tmp_path), child.session_id)
    assert Conversation.restore(await snapshot.read_all()).prompt_index() == child.conversation.prompt_index()


async def test_settings_and_attachments_are_copied_and_local_plans_are_not(tmp_path):
    s = await open_session(tmp_path, settings={"model": "big", "effort": 3}, attached_artifacts=("doc-1", "board.2"))
    await s.turn("one")
    local = local_dir(tmp_path, s.session_id)
    (local / "plans").mkdir(parents=True)
    (local / "plans" / "current.md").write_text("draft plan")
    (local / "notes" / "deep").mkdir(parents=True)
    (local / "notes" / "deep" / "n.md").write_text("a note")
    (local / "top.txt").write_text("top")
    impact, result = await fork(s, 1, LATER)
    assert impact.local_files == ("notes/deep/n.md", "top.txt")
    assert impact.plans_note == NO_PLAN_RECORD == result.plans_note
    assert impact.settings == {"model": "big", "effort": 3}
    child = result.child
    sidecar = child.conversation.sidecar
    assert sidecar.settings == {"model": "big", "effort": 3}
    assert sidecar.attached_artifacts == ["doc-1", "board.2"]
    child_local = local_dir(tmp_path, child.session_id)
    assert sorted(str(p.relative_to(child_local)) for p in child_local.rglob("*") if p.is_file()) == [
        "notes/deep/n.md",
        "top.txt",
    ]
    assert not (child_local / "plans").exists()
    # Independent copies: changing the child's does not touch the source's.
    (child_local / "top.txt").write_text("changed in the child")
    assert (local / "top.txt").read_text() == "top"


async def test_the_childs_local_copy_keeps_each_file_mode_and_every_directory(tmp_path):
    """A Fork copies work:// files as the user left them: an executable
    script stays executable, a private note private, and an empty
    directory (made, say, for notes to come) is there too."""
    s = await open_session(tmp_path)
    await s.turn("one")
    local = local_dir(tmp_path, s.session_id)
    (local / "bin").mkdir(parents=True)
    (local / "bin" / "check.sh").write_text("#!/bin/sh\necho ok\n")
    (local / "bin" / "check.sh").chmod(0o755)
    (local / "shared-ish.md").write_text("readable by all")
    (local / "shared-ish.md").chmod(0o644)
    (local / "secret.md").write_text("mine only")
    (local / "secret.md").chmod(0o600)
    (local / "drafts" / "later").mkdir(parents=True)
    (local / "drafts").chmod(0o750)
    _, result = await fork(s, 1, LATER)
    child_local = local_dir(tmp_path, result.child.session_id)
    modes = {str(p.relative_to(child_local)): p.stat().st_mode & 0o7777 for p in child_local.rglob("*")}
    assert modes == {
        "bin": (local / "bin").stat().st_mode & 0o7777,
        "bin/check.sh": 0o755,
        "shared-ish.md": 0o644,
        "secret.md": 0o600,
        "drafts": 0o750,
        "drafts/later": (local / "drafts" / "later").stat().st_mode & 0o7777,
    }
    assert (child_local / "bin" / "check.sh").read_text() == "#!/bin/sh\necho ok\n"

async def test_the_child_keeps_the_lease_when_asked(tmp_path):
    s = await source_session(tmp_path)
    impact = await prepare_fork(s.target, s.session_id, 3, at=LATER)
    result = await commit_fork(s.target, impact.token, ME, keep_lease=True)
    child = result.child
    assert child.lease is not None and not child.lease.released
    # The caller can carry the child on through the kept lease.
    conversation = child.conversation
    turn_id = conversation.begin_turn("four in the child", at=LATER + 1)
    conversation.append(Response(turn_id=turn_id, text="ok"))
    conversation.settle(Outcome.COMPLETED, at=LATER + 1)
    candidate = conversation.artifacts_for_save()
    await child.publisher.publish(candidate.changed)
    assert await committed_view(tmp_path, child.session_id) == (4, ["one", "two", "three", "four in the child"])


async def test_an_inherited_response_is_forked_from_the_source(tmp_path):
    s = await source_session(tmp_path)
    _, result = await fork(s, 2, LATER)
    child_id = result.child.session_id
    with pytest.raises(LifecycleRefused, match=f"inherited from session {s.session_id}"):
        await prepare_fork(LocalTarget(tmp_path), child_id, 2)
    with pytest.raises(LifecycleRefused, match="no settled response"):
        await prepare_fork(s.target, s.session_id, 4)


async def test_a_moved_source_or_local_file_is_stale(tmp_path):
    s = await source_session(tmp_path)
    local = local_dir(tmp_path, s.session_id)
    local.mkdir(parents=True)
    (local / "n.md").write_text("one")
    impact = await prepare_fork(s.target, s.session_id, 2)
    (local / "n.md").write_text("changed")
    with pytest.raises(StaleState, match="local/n.md changed"):
        await commit_fork(s.target, impact.token, ME)
    impact = await prepare_fork(s.target, s.session_id, 2)
    await s.turn("four")
    with pytest.raises(StaleState, match="committed head moved"):
        await commit_fork(s.target, impact.token, ME)
    sessions = sorted(p.name for p in (tmp_path / ".mevedel" / "sessions").iterdir())
    assert sessions == [s.session_id]  # nothing was created


async def test_a_symlink_in_local_refuses_before_anything_is_created(tmp_path):
    s = await source_session(tmp_path)
    local = local_dir(tmp_path, s.session_id)
    local.mkdir(parents=True)
    (local / "link").symlink_to(tmp_path)
    with pytest.raises(LifecycleRefused, match="local/link"):
        await prepare_fork(s.target, s.session_id, 1)


# Variants ------------------------------------------------------------------------


async def test_variants_list_source_then_forks_oldest_first(tmp_path):
    s = await source_session(tmp_path)
    forks = []
    for offset in (30, 10, 20):
        _, result = await fork(s, 2, LATER + offset)
        forks.append(result.child.session_id)
    oldest_first = [forks[1], forks[2], forks[0]]
    group = await fork_variants(s.target, s.session_id, 2)
    assert [v.session_id for v in group.variants] == [s.session_id, *oldest_first]
    assert [v.role for v in group.variants] == ["source", "conversation", "conversation", "conversation"]
    assert group.point.fork_point_id == s.conversation.prompt_index()[1].turn_id
    assert [v.is_current for v in group.variants] == [True, False, False, False]
    # From a child, the same group; the child is the current one.
    group = await fork_variants(LocalTarget(tmp_path), forks[2], 2)
    assert [v.session_id for v in group.variants] == [s.session_id, *oldest_first]
    assert [v.is_current for v in group.variants] == [False, False, True, False]
    # Another response of the source has no forks.
    assert (await fork_variants(s.target, s.session_id, 1)).forks == ()


async def test_a_childs_later_response_starts_its_own_group(tmp_path):
    s = await source_session(tmp_path)
    impact = await prepare_fork(s.target, s.session_id, 3, at=LATER)
    child = (await commit_fork(s.target, impact.token, ME, keep_lease=True)).child
    conversation = child.conversation
    turn_id = conversation.begin_turn("four in the child", at=LATER + 1)
    conversation.append(Response(turn_id=turn_id, text="ok"))
    conversation.settle(Outcome.COMPLETED, at=LATER + 1)
    await child.publisher.publish(conversation.artifacts_for_save().changed)
    grandchild_impact = await prepare_fork(LocalTarget(tmp_path), child.session_id, 4, at=LATER + 2)
    grandchild = (await commit_fork(LocalTarget(tmp_path), grandchild_impact.token, ME)).child
    group = await fork_variants(LocalTarget(tmp_path), child.session_id, 4)
    assert group.point.source_id == child.session_id
    assert [v.session_id for v in group.variants] == [child.session_id, grandchild.session_id]
    # The source's own group at turn 3 holds the child, not the grandchild.
    group = await fork_variants(s.target, s.session_id, 3)
    assert [v.session_id for v in group.variants] == [s.session_id, child.session_id]
    # Turn 3 of the grandchild is inherited twice over: still the source's group.
    group = await fork_variants(LocalTarget(tmp_path), grandchild.session_id, 3)
    assert group.point.source_id == s.session_id and not any(v.is_current for v in group.variants)


async def test_rewound_past_variants_disappear_independently(tmp_path):
    s = await source_session(tmp_path)
    _, a = await fork(s, 2, LATER + 1)
    _, b = await fork(s, 2, LATER + 2)
    # Child b rewinds before its fork point: it leaves the group.
    b_lease_target = LocalTarget(tmp_path)
    lease = await acquire_lease(b_lease_target, b.child.session_id, ME, duration_seconds=60)
    impact = await prepare_rewind(b_lease_target, b.child.session_id, Boundary.before(2))
    await commit_rewind(Publisher(lease), impact.token)
    group = await fork_variants(s.target, s.session_id, 2)
    assert [v.session_id for v in group.variants] == [s.session_id, a.child.session_id]
    # The source rewinds past the point: the surviving child is a detached group.
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    await commit_rewind(s.publisher, impact.token)
    group = await fork_variants(LocalTarget(tmp_path), a.child.session_id, 2)
    assert group.source is None
    assert [v.session_id for v in group.variants] == [a.child.session_id]
    # A new turn 2 in the source reuses the number, not the identity.
    s.adopt(Conversation.restore(await (await read_committed(LocalTarget(tmp_path), s.session_id)).read_all()))
    await s.turn("two again")
    group = await fork_variants(LocalTarget(tmp_path), a.child.session_id, 2)
    assert group.source is None and [v.session_id for v in group.variants] == [a.child.session_id]


async def test_the_childs_unchanged_bytes_are_the_sources_and_outlive_it(tmp_path):
    """The child links what it shares with its source instead of copying it,
    and owns those bytes: removing the source leaves the child whole."""
    s = await source_session(tmp_path)
    _impact, result = await fork(s, 3, LATER)
    child_id = result.child.session_id
    source = await read_committed(LocalTarget(tmp_path), s.session_id)
    child = await read_committed(LocalTarget(tmp_path), child_id)
    source_bytes = await source.read_all()
    expected = await child.read_all()

    def inode(snapshot, logical):
        return os.stat(tmp_path / snapshot.paths.inside(snapshot.manifest.entries[logical].published)).st_ino

    shared = [p for p in child.logical_paths() if p in source_bytes and source_bytes[p] == expected[p]]
    differing = [p for p in child.logical_paths() if p not in shared]
    assert shared and differing  # file history is shared; the sidecar names the child
    assert all(inode(child, p) == inode(source, p) for p in shared)
    assert all(inode(child, p) not in {inode(source, q) for q in source.logical_paths()} for p in differing)
    shutil.rmtree(tmp_path / source.paths.root)
    assert await (await read_committed(LocalTarget(tmp_path), child_id)).read_all() == expected
