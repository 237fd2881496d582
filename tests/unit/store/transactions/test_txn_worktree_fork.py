"""Worktree Fork against a real Git repository: the linked worktree at
HEAD, restored and retargeted files, the one-shot report, refusals before
anything is created, and the cleanup commands after a late failure."""

from __future__ import annotations

import shutil

import pytest
from txn_sessions import DELETE, ME, committed_view, git, init_repo, open_session, read

from mevedel_server.store.content.sidecar import ForkType
from mevedel_server.store.content.transcript import Outcome, Response
from mevedel_server.store.transactions.git_runner import LocalGit
from mevedel_server.store.transactions.lifecycle_token import (
    LifecycleRefused,
    StaleState,
)
from mevedel_server.store.transactions.rewind import commit_rewind, prepare_rewind
from mevedel_server.store.transactions.snapshot_cut import Boundary
from mevedel_server.store.transactions.worktree_fork import (
    WorktreeForkFailed,
    commit_worktree_fork,
    prepare_worktree_fork,
)
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, ProgramTarget


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


class Opaque(ProgramTarget):
    """A target that runs programs but says nothing of where its files are."""

    def __init__(self, inner) -> None:
        self._inner = inner

    async def run(self, program):
        return await self._inner.run(program)


async def test_a_target_that_can_run_no_git_is_refused(tmp_path):
    s = await repository_session(tmp_path)
    with pytest.raises(LifecycleRefused, match="cannot run git where this workspace is"):
        await prepare_worktree_fork(Opaque(s.target), s.session_id, 1)
    # The Rewind impact's Git check says the same instead of refusing.
    rewind = await prepare_rewind(Opaque(s.target), s.session_id, Boundary.before(2))
    assert rewind.git.status == "not-local"


async def test_missing_git_is_refused_before_anything_is_created(tmp_path):
    s = await repository_session(tmp_path)
    absent = LocalGit(tmp_path, program="git-that-is-not-installed")
    with pytest.raises(LifecycleRefused, match="^.*Worktree Fork needs git, which is not installed$"):
        await prepare_worktree_fork(s.target, s.session_id, 1, git=absent)
    impact = await prepare_worktree_fork(s.target, s.session_id, 1)
    with pytest.raises(LifecycleRefused, match="Worktree Fork needs git, which is not installed"):
        await commit_worktree_fork(s.target, impact.token, ME, git=absent)
    assert not (tmp_path / ".worktrees").exists()
    assert sessions(tmp_path) == [s.session_id]


async def test_an_existing_worktree_directory_refuses(tmp_path):
    s = await repository_session(tmp_path)
    (tmp_path / ".worktrees" / "mine").mkdir(parents=True)
    with pytest.raises(LifecycleRefused, match=r"\.worktrees/mine already exists; choose another name"):
        await prepare_worktree_fork(s.target, s.session_id, 1, name="mine")
    assert "mevedel/mine" not in git(tmp_path, "branch", "--list")


async def test_a_source_checkout_that_is_gone_is_refused(tmp_path):
    s = await repository_session(tmp_path)
    impact = await prepare_worktree_fork(s.target, s.session_id, 2)
    child = (await commit_worktree_fork(s.target, impact.token, ME, keep_lease=True)).child
    conversation = child.conversation
    turn_id = conversation.begin_turn("three in the fork", at=2_000_000_000)
    conversation.append(Response(turn_id=turn_id, text="ok"))
    conversation.settle(Outcome.COMPLETED, at=2_000_000_000, current={})
    await child.publisher.publish(conversation.artifacts_for_save().changed)
    git(tmp_path, "worktree", "remove", "--force", ".worktrees/fork-1")
    with pytest.raises(LifecycleRefused, match="the source checkout .worktrees/fork-1 is not a directory"):
        await prepare_worktree_fork(LocalTarget(tmp_path), child.session_id, 3)


async def test_a_failed_worktree_add_names_relative_paths_only(tmp_path):
    s = await repository_session(tmp_path)
    impact = await prepare_worktree_fork(s.target, s.session_id, 1)
    # Registered with git but missing on disk: the checks pass, and git
    # creates the branch, then refuses the directory.
    git(tmp_path, "worktree", "add", "-q", "-b", "elsewhere", ".worktrees/fork-1")
    shutil.rmtree(tmp_path / ".worktrees" / "fork-1")
    with pytest.raises(WorktreeForkFailed) as caught:
        await commit_worktree_fork(s.target, impact.token, ME)
    message = str(caught.value)
    assert "git worktree add failed: use 'add -f' to override" in message
    # Only the branch was created: the registered worktree there is not ours
    # to remove.
    assert caught.value.cleanup == ("git branch -D mevedel/fork-1",)
    assert str(tmp_path) not in message


async def test_git_messages_name_the_workspace_relatively(tmp_path):
    # Reached through a symbolic link: git run with a working directory
    # (not a shell's ``cd``) prints the resolved spelling of the root.
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    root = tmp_path / "link" / "ws"
    await repository_session(root)
    lock = tmp_path / "real" / "ws" / ".git" / "refs" / "heads" / "taken.lock"
    lock.touch()
    failed = await LocalGit(root).run(".", "branch", "taken")
    assert b"Unable to create '.git/refs/heads/taken.lock'" in failed.stderr
    assert str(tmp_path).encode() not in failed.stderr
