"""Worktree Fork and the Rewind Git check of an SSH workspace, against a
real OpenSSH server on loopback and a real Git repository: git runs on the
host (``SshTarget.run_command``), and every answer, refusal and file result
is the one the same workspace gives locally, with no absolute path of the
remote root in any message."""

from __future__ import annotations

import pytest
from txn_sessions import DELETE, ME, git, init_repo, open_session, read

from mevedel_server.store.content.sidecar import ForkType
from mevedel_server.store.transactions.git_runner import RemoteGit
from mevedel_server.store.transactions.lifecycle_token import LifecycleRefused
from mevedel_server.store.transactions.rewind import commit_rewind, prepare_rewind
from mevedel_server.store.transactions.snapshot_cut import Boundary
from mevedel_server.store.transactions.worktree_fork import (
    WorktreeForkFailed,
    commit_worktree_fork,
    prepare_worktree_fork,
)
from mevedel_server.store.workspace_wide.listing import list_sessions
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, TargetUnavailable


@pytest.fixture
def remote(ssh_connect):
    """Connects an SshTarget to a directory of this machine over loopback."""

    async def connect(root):
        root.mkdir(parents=True, exist_ok=True)
        return await ssh_connect(root)

    return connect


async def repository(root, target=None, *, repository=True):
    root.mkdir(parents=True, exist_ok=True)
    if repository:
        init_repo(root)
    (root / "a.txt").write_bytes(b"a0\n")
    (root / "gone.txt").write_bytes(b"tracked\n")
    (root / "kept.txt").write_bytes(b"at HEAD\n")
    if repository:
        git(root, "add", ".")
        git(root, "commit", "-qm", "base")
    s = await open_session(root, target=target)
    await s.turn("one", {"a.txt": b"a1\n", "new/n.txt": b"new\n", "gone.txt": DELETE}, gaps={"kept.txt": "ran make"})
    await s.turn("two", {"a.txt": b"a2\n"})
    return s


async def pair(tmp_path, remote, *, repository_too=True):
    """The same workspace twice: one through a LocalTarget, one over SSH."""
    here = await repository(tmp_path / "here", repository=repository_too)
    there_root = tmp_path / "there"
    there = await repository(there_root, await remote(there_root), repository=repository_too)
    return here, there


async def refusal(call) -> LifecycleRefused:
    with pytest.raises(LifecycleRefused) as caught:
        await call
    return caught.value


async def test_a_worktree_fork_over_ssh_creates_the_worktree_and_lists_the_child(tmp_path, remote):
    here, there = await pair(tmp_path, remote)
    root = there.root
    head = git(root, "rev-parse", "HEAD")
    local = await prepare_worktree_fork(here.target, here.session_id, 1)
    impact = await prepare_worktree_fork(there.target, there.session_id, 1)
    planned = impact.worktree
    assert (planned.name, planned.branch, planned.directory, planned.source_checkout, planned.base_commit) == (
        "fork-1",
        "mevedel/fork-1",
        ".worktrees/fork-1",
        ".",
        head,
    )
    assert (impact.restores, impact.unrestored, impact.shared) == (local.restores, local.unrestored, local.shared)
    result = await commit_worktree_fork(there.target, impact.token, ME)
    local_result = await commit_worktree_fork(here.target, local.token, ME)
    assert (result.restored, result.unrestored) == (local_result.restored, local_result.unrestored)
    tree = root / ".worktrees" / "fork-1"
    assert read(tree, "a.txt") == b"a1\n" and read(tree, "new/n.txt") == b"new\n"
    assert read(tree, "gone.txt") is None and read(tree, "kept.txt") == b"at HEAD\n"
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD") == "mevedel/fork-1"
    assert git(tree, "rev-parse", "HEAD") == head
    assert ".worktrees/fork-1" in git(root, "worktree", "list")
    assert read(root, "a.txt") == b"a2\n"  # the source checkout is untouched
    child = result.child
    sidecar = child.conversation.sidecar
    assert sidecar.fork.fork_type is ForkType.WORKTREE
    assert (sidecar.worktree.directory, sidecar.worktree.branch, sidecar.worktree.base_commit) == (".worktrees/fork-1", "mevedel/fork-1", head)
    listing = await list_sessions(there.target, ME)
    assert sorted(row.session_id for row in listing.rows) == sorted([there.session_id, child.session_id])


async def test_the_rewind_git_check_asks_the_remote_git(tmp_path, remote):
    here, there = await pair(tmp_path, remote)
    for s in (here, there):
        git(s.root, "add", "a.txt")
    local = await prepare_rewind(here.target, here.session_id, Boundary.before(2))
    impact = await prepare_rewind(there.target, there.session_id, Boundary.before(2))
    assert impact.git.status == local.git.status == "checked"
    assert [(d.path, d.restored_blob) for d in impact.git.divergent] == [(d.path, d.restored_blob) for d in local.git.divergent]
    assert [d.path for d in impact.git.divergent] == ["a.txt"]


async def test_a_worktree_childs_rewind_checks_its_own_index_over_ssh(tmp_path, remote):
    root = tmp_path / "there"
    s = await repository(root, await remote(root))
    impact = await prepare_worktree_fork(s.target, s.session_id, 1)
    child = (await commit_worktree_fork(s.target, impact.token, ME, keep_lease=True)).child
    tree = root / ".worktrees" / "fork-1"
    git(tree, "add", "a.txt")  # staged in the child's index only
    rewind = await prepare_rewind(s.target, child.session_id, Boundary.before(1))
    assert rewind.git.status == "checked"
    assert [d.path for d in rewind.git.divergent] == [".worktrees/fork-1/a.txt"]
    await commit_rewind(child.publisher, rewind.token)
    assert read(tree, "a.txt") == b"a0\n" and read(tree, "gone.txt") == b"tracked\n"


async def test_refusals_over_ssh_are_the_local_ones(tmp_path, remote):
    here, there = await pair(tmp_path, remote)
    for s in (here, there):
        git(s.root, "branch", "taken")
        (s.root / ".worktrees" / "mine").mkdir(parents=True)
    cases = [
        dict(name="mine"),
        dict(name="other", branch="taken"),
        dict(name="bad name"),
        dict(name="ok", branch="bad..branch"),
    ]
    for options in cases:
        local = await refusal(prepare_worktree_fork(here.target, here.session_id, 1, **options))
        remote_refusal = await refusal(prepare_worktree_fork(there.target, there.session_id, 1, **options))
        assert (remote_refusal.reason, remote_refusal.kind) == (local.reason, local.kind)
        assert str(tmp_path) not in str(remote_refusal)
    named = await refusal(prepare_worktree_fork(there.target, there.session_id, 1, name="mine"))
    assert named.reason == ".worktrees/mine already exists; choose another name"
    assert "mevedel/mine" not in git(there.root, "branch", "--list")


async def test_outside_git_over_ssh_is_the_local_refusal(tmp_path, remote):
    here, there = await pair(tmp_path, remote, repository_too=False)
    local = await refusal(prepare_worktree_fork(here.target, here.session_id, 1))
    remote_refusal = await refusal(prepare_worktree_fork(there.target, there.session_id, 1))
    assert remote_refusal.reason == local.reason == "the source checkout is not a Git work tree"
    assert str(tmp_path) not in str(remote_refusal)


async def test_missing_git_on_the_host_is_the_local_refusal(tmp_path, remote):
    root = tmp_path / "there"
    s = await repository(root, await remote(root))
    absent = RemoteGit(s.target, program="mevedel-no-such-git")
    refused = await refusal(prepare_worktree_fork(s.target, s.session_id, 1, git=absent))
    assert (refused.reason, refused.kind) == ("Worktree Fork needs git, which is not installed", "unavailable")
    impact = await prepare_worktree_fork(s.target, s.session_id, 1)
    refused = await refusal(commit_worktree_fork(s.target, impact.token, ME, git=absent))
    assert refused.reason == "Worktree Fork needs git, which is not installed"
    assert not (root / ".worktrees").exists()


async def test_a_symlinked_worktrees_directory_over_ssh_is_refused(tmp_path, remote):
    root = tmp_path / "there"
    s = await repository(root, await remote(root))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".worktrees").symlink_to(elsewhere)
    refused = await refusal(prepare_worktree_fork(s.target, s.session_id, 1))
    assert refused.reason == ".worktrees/ is a symbolic link"
    assert list(elsewhere.iterdir()) == []


async def test_a_late_failure_over_ssh_keeps_the_worktree_and_names_the_cleanup(tmp_path, remote):
    root = tmp_path / "there"
    s = await repository(root, await remote(root))
    flaky = FaultInjectingTarget(s.target)
    impact = await prepare_worktree_fork(flaky, s.session_id, 1)
    flaky.arm(9, "error")  # inside the child's publication, after the worktree exists
    with pytest.raises(WorktreeForkFailed) as caught:
        await commit_worktree_fork(flaky, impact.token, ME)
    assert flaky.fired
    failure = caught.value
    assert failure.cleanup == ("git worktree remove --force .worktrees/fork-1", "git branch -D mevedel/fork-1")
    assert str(tmp_path) not in str(failure)
    assert (root / ".worktrees" / "fork-1" / ".git").exists()
    assert sorted(p.name for p in (root / ".mevedel" / "sessions").iterdir()) == [s.session_id]
    for command in failure.cleanup:
        git(root, *command.split()[1:])
    assert not (root / ".worktrees" / "fork-1").exists()
    assert "mevedel/fork-1" not in git(root, "branch", "--list")
    # The workspace is usable again for the same fork.
    again = await prepare_worktree_fork(LocalTarget(root), s.session_id, 1)
    assert again.worktree.name == "fork-1"


async def test_git_messages_name_the_workspace_relatively(tmp_path, remote):
    # The root is reached through a symbolic link above it: git may print
    # either spelling (the shell's logical one, or the resolved one it
    # reports as the top level).
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    root = tmp_path / "link" / "ws"
    s = await repository(root, await remote(root))
    lock = tmp_path / "real" / "ws" / ".git" / "refs" / "heads" / "mevedel" / "fork-1.lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    runner = RemoteGit(s.target)
    impact = await prepare_worktree_fork(s.target, s.session_id, 1, git=runner)
    failed = await runner.run(".", "branch", "mevedel/fork-1")
    assert not failed.ok
    assert b"Unable to create '.git/refs/heads/mevedel/fork-1.lock'" in failed.stderr
    assert str(tmp_path).encode() not in failed.stderr
    # The fork itself fails before creating anything, naming nothing absolute.
    refused = await refusal(commit_worktree_fork(s.target, impact.token, ME))
    assert refused.reason.startswith("git worktree add failed: ")
    assert str(tmp_path) not in str(refused)


class LosesTheAdd:
    """git on the host, except that the answer to ``git worktree add`` is
    lost to a dropped connection, after it ran (``ran``) or before."""

    def __init__(self, inner: RemoteGit, *, ran: bool) -> None:
        self.inner = inner
        self.ran = ran

    def learn_root_spelling(self, spelling: str) -> None:
        self.inner.learn_root_spelling(spelling)

    async def run(self, cwd, *args, **options):
        if args[:2] == ("worktree", "add"):
            if self.ran:
                await self.inner.run(cwd, *args, **options)
            raise TargetUnavailable("build-box", "the connection dropped", outcome_unknown=True)
        return await self.inner.run(cwd, *args, **options)


async def test_an_add_whose_outcome_is_lost_is_judged_by_what_exists(tmp_path, remote):
    root = tmp_path / "there"
    s = await repository(root, await remote(root))
    impact = await prepare_worktree_fork(s.target, s.session_id, 1)
    # Lost before git ran: nothing exists, so the fork is simply refused.
    refused = await refusal(commit_worktree_fork(s.target, impact.token, ME, git=LosesTheAdd(RemoteGit(s.target), ran=False)))
    assert refused.kind == "unavailable"
    assert refused.reason == "git worktree add did not report its outcome: ssh target build-box: the connection dropped"
    assert not (root / ".worktrees" / "fork-1").exists()
    # Lost after git ran: the worktree exists, so it is kept and the
    # cleanup is named.
    with pytest.raises(WorktreeForkFailed) as caught:
        await commit_worktree_fork(s.target, impact.token, ME, git=LosesTheAdd(RemoteGit(s.target), ran=True))
    assert caught.value.cleanup == ("git worktree remove --force .worktrees/fork-1", "git branch -D mevedel/fork-1")
    assert str(tmp_path) not in str(caught.value)
    assert (root / ".worktrees" / "fork-1" / ".git").exists()
    assert sorted(p.name for p in (root / ".mevedel" / "sessions").iterdir()) == [s.session_id]
