"""Worktree Fork against a real Git repository: the linked worktree at
HEAD, restored and retargeted files, the one-shot report, refusals before
anything is created, and the cleanup commands after a late failure."""

from __future__ import annotations

import pytest
from txn_sessions import DELETE, ME, committed_view, git, init_repo, open_session, read

from mevedel_server.store.lifecycle_token import LifecycleRefused, StaleState
from mevedel_server.store.rewind import commit_rewind, prepare_rewind
from mevedel_server.store.sidecar import ForkType
from mevedel_server.store.snapshot_cut import Boundary
from mevedel_server.store.transcript import Outcome, Response
from mevedel_server.store.worktree_fork import WorktreeForkFailed, commit_worktree_fork, prepare_worktree_fork
from mevedel_server.targets import FaultInjectingTarget, LocalTarget


async def repository_session(root):
    init_repo(root)
    (root / "a.txt").write_bytes(b"a0\n")
    (root / "gone.txt").write_bytes(b"tracked\n")
    (root / "kept.txt").write_bytes(b"at HEAD\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")
    s = await open_session(root)
    await s.turn("one", {"a.txt": b"a1\n", "new/n.txt": b"new\n", "gone.txt": DELETE}, gaps={"kept.txt": "ran make"})
    await s.turn("two", {"a.txt": b"a2\n"})
    return s


def sessions(root):
    return sorted(p.name for p in (root / ".mevedel" / "sessions").iterdir())


async def test_the_worktree_is_at_head_with_the_turns_files_restored(tmp_path):
    s = await repository_session(tmp_path)
    head = git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "uncommitted.txt").write_text("not copied")
    impact = await prepare_worktree_fork(s.target, s.session_id, 1)
    planned = impact.worktree
    assert (planned.name, planned.branch, planned.directory, planned.base_commit) == (
        "fork-1",
        "mevedel/fork-1",
        ".worktrees/fork-1",
        head,
    )
    assert impact.restores == (".worktrees/fork-1/a.txt", ".worktrees/fork-1/gone.txt", ".worktrees/fork-1/new/n.txt")
    assert impact.unrestored == ((".worktrees/fork-1/kept.txt", "ran make"),)
    result = await commit_worktree_fork(s.target, impact.token, ME)
    tree = tmp_path / ".worktrees" / "fork-1"
    assert read(tree, "a.txt") == b"a1\n"  # turn 1's result, not the source's a2
    assert read(tree, "new/n.txt") == b"new\n"
    assert read(tree, "gone.txt") is None
    assert read(tree, "kept.txt") == b"at HEAD\n"  # the gap keeps HEAD
    assert read(tree, "uncommitted.txt") is None
    assert result.unrestored == ((".worktrees/fork-1/kept.txt", "ran make"),)
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD") == "mevedel/fork-1"
    assert git(tree, "rev-parse", "HEAD") == head
    # The source checkout is untouched.
    assert read(tmp_path, "a.txt") == b"a2\n" and read(tmp_path, "gone.txt") is None
    sidecar = result.child.conversation.sidecar
    assert sidecar.fork.fork_type is ForkType.WORKTREE and sidecar.fork.turn == 1
    assert (sidecar.worktree.directory, sidecar.worktree.branch, sidecar.worktree.base_commit) == (
        ".worktrees/fork-1",
        "mevedel/fork-1",
        head,
    )
    # Checkpoint paths are retargeted to the child's checkout.
    (record,) = result.child.conversation.file_snapshots()
    assert sorted(record.files) == [".worktrees/fork-1/a.txt", ".worktrees/fork-1/gone.txt", ".worktrees/fork-1/kept.txt", ".worktrees/fork-1/new/n.txt"]
    assert await committed_view(tmp_path, result.child.session_id) == (1, ["one"])


async def test_the_childs_rewind_restores_inside_its_worktree(tmp_path):
    s = await repository_session(tmp_path)
    impact = await prepare_worktree_fork(s.target, s.session_id, 1)
    result = await commit_worktree_fork(s.target, impact.token, ME, keep_lease=True)
    child = result.child
    tree = tmp_path / ".worktrees" / "fork-1"
    git(tree, "add", "a.txt")  # the child's own index stages turn 1's a1
    rewind = await prepare_rewind(LocalTarget(tmp_path), child.session_id, Boundary.before(1))
    # The Git check asks the child's worktree, where the path is staged.
    assert rewind.git.status == "checked"
    assert [d.path for d in rewind.git.divergent] == [".worktrees/fork-1/a.txt"]
    assert sorted(r.path for r in rewind.restores) == [".worktrees/fork-1/a.txt", ".worktrees/fork-1/gone.txt", ".worktrees/fork-1/new/n.txt"]
    await commit_rewind(child.publisher, rewind.token)
    assert read(tree, "a.txt") == b"a0\n" and read(tree, "gone.txt") == b"tracked\n" and read(tree, "new/n.txt") is None
    assert read(tmp_path, "a.txt") == b"a2\n"  # the source checkout is not touched


async def test_a_fork_of_a_worktree_fork_is_a_sibling(tmp_path):
    s = await repository_session(tmp_path)
    impact = await prepare_worktree_fork(s.target, s.session_id, 2)
    first = (await commit_worktree_fork(s.target, impact.token, ME, keep_lease=True)).child
    tree = tmp_path / ".worktrees" / "fork-1"
    git(tree, "commit", "-qam", "work in the fork")
    # The child's own turn, then a fork of that turn from the child.
    conversation = first.conversation
    turn_id = conversation.begin_turn("three in the fork", at=2_000_000_000)
    conversation.capture_file(".worktrees/fork-1/a.txt", read(tree, "a.txt"))
    (tree / "a.txt").write_bytes(b"fork a3\n")
    conversation.append(Response(turn_id=turn_id, text="ok"))
    conversation.settle(Outcome.COMPLETED, at=2_000_000_000, current={".worktrees/fork-1/a.txt": b"fork a3\n"})
    await first.publisher.publish(conversation.artifacts_for_save().changed)
    impact = await prepare_worktree_fork(LocalTarget(tmp_path), first.session_id, 3)
    assert impact.worktree.source_checkout == ".worktrees/fork-1"
    assert impact.worktree.directory == ".worktrees/fork-2"
    assert impact.worktree.base_commit == git(tree, "rev-parse", "HEAD")
    result = await commit_worktree_fork(LocalTarget(tmp_path), impact.token, ME)
    sibling = tmp_path / ".worktrees" / "fork-2"
    assert read(sibling, "a.txt") == b"fork a3\n"
    assert sorted(result.child.conversation.file_snapshots()[-1].files) == [".worktrees/fork-2/a.txt"]


async def test_an_existing_branch_refuses_before_anything_is_created(tmp_path):
    s = await repository_session(tmp_path)
    git(tmp_path, "branch", "taken")
    before = sessions(tmp_path)
    with pytest.raises(LifecycleRefused, match="branch taken already exists"):
        await prepare_worktree_fork(s.target, s.session_id, 1, name="mine", branch="taken")
    # Prepared while free, taken before the commit: the commit refuses too.
    impact = await prepare_worktree_fork(s.target, s.session_id, 1, name="mine", branch="later")
    git(tmp_path, "branch", "later")
    with pytest.raises(LifecycleRefused, match="branch later already exists"):
        await commit_worktree_fork(s.target, impact.token, ME)
    assert not (tmp_path / ".worktrees" / "mine").exists()
    assert sessions(tmp_path) == before
    assert "mine" not in git(tmp_path, "worktree", "list")


async def test_allocation_takes_the_first_unused_suffix(tmp_path):
    s = await repository_session(tmp_path)
    git(tmp_path, "branch", "mevedel/fork-1")
    (tmp_path / ".worktrees" / "fork-2").mkdir(parents=True)
    impact = await prepare_worktree_fork(s.target, s.session_id, 1)
    assert (impact.worktree.name, impact.worktree.branch) == ("fork-3", "mevedel/fork-3")


async def test_outside_git_or_without_a_commit_is_refused(tmp_path):
    plain = tmp_path / "plain"
    s = await open_session(plain)
    await s.turn("one", {"a.txt": b"a\n"})
    with pytest.raises(LifecycleRefused, match="not a Git work tree"):
        await prepare_worktree_fork(s.target, s.session_id, 1)
    empty = tmp_path / "empty"
    init_repo(empty)
    s = await open_session(empty)
    await s.turn("one")
    with pytest.raises(LifecycleRefused, match="no HEAD commit"):
        await prepare_worktree_fork(s.target, s.session_id, 1)


async def test_a_symlinked_worktrees_directory_is_refused(tmp_path):
    s = await repository_session(tmp_path)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (tmp_path / ".worktrees").symlink_to(elsewhere)
    with pytest.raises(LifecycleRefused, match="symbolic link"):
        await prepare_worktree_fork(s.target, s.session_id, 1)


async def test_a_moved_head_is_stale(tmp_path):
    s = await repository_session(tmp_path)
    impact = await prepare_worktree_fork(s.target, s.session_id, 1)
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "moved")
    with pytest.raises(StaleState, match="HEAD moved"):
        await commit_worktree_fork(s.target, impact.token, ME)
    assert not (tmp_path / ".worktrees" / "fork-1").exists()


async def test_a_failure_after_creation_keeps_the_worktree_and_names_the_cleanup(tmp_path):
    s = await repository_session(tmp_path)
    flaky = FaultInjectingTarget(LocalTarget(tmp_path))
    impact = await prepare_worktree_fork(flaky, s.session_id, 1)
    flaky.arm(9, "error")  # inside the child's publication, after the worktree exists
    with pytest.raises(WorktreeForkFailed) as caught:
        await commit_worktree_fork(flaky, impact.token, ME)
    assert flaky.fired
    failure = caught.value
    assert failure.cleanup == ("git worktree remove --force .worktrees/fork-1", "git branch -D mevedel/fork-1")
    assert "git worktree remove --force .worktrees/fork-1 && git branch -D mevedel/fork-1" in str(failure)
    assert str(tmp_path) not in str(failure)
    assert (tmp_path / ".worktrees" / "fork-1" / ".git").exists()
    assert "mevedel/fork-1" in git(tmp_path, "branch", "--list")
    assert sessions(tmp_path) == [s.session_id]  # the uncommitted child is gone
    # The commands do clean up.
    for command in failure.cleanup:
        git(tmp_path, *command.split()[1:])
    assert not (tmp_path / ".worktrees" / "fork-1").exists()
    assert "mevedel/fork-1" not in git(tmp_path, "branch", "--list")


async def test_a_fork_is_refused_on_a_target_that_is_not_local(tmp_path):
    s = await repository_session(tmp_path)
    with pytest.raises(LifecycleRefused, match="remote target"):
        await prepare_worktree_fork(s.target, s.session_id, 1, workspace_root=None)
