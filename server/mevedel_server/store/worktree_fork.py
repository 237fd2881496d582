"""Worktree Fork: a Conversation Fork plus a linked Git worktree.

The child session is the fork of :mod:`.fork` with fork type ``worktree``
and a worktree origin (source checkout, worktree directory, branch and base
commit, all workspace-relative). Its checkout is a linked worktree created
by the real ``git`` at the source checkout's current HEAD::

    git worktree add -b <branch> .worktrees/<name> <HEAD>

A source that is itself a worktree fork is forked from its own checkout, and
the new worktree is its sibling under the workspace's ``.worktrees/``.

Files: every repository-local path the kept turns captured (inside the
source checkout, outside ``.mevedel/`` and other worktrees) gets the content
the selected turn left, written through the workspace target into the new
worktree; a path whose last record has no post-turn content, or whose bytes
are unavailable, keeps its HEAD content and is named in the result's
one-shot ``unrestored`` report. Uncaptured files keep HEAD, uncommitted
source changes are not copied, and captured paths outside the checkout stay
shared. The child's file checkpoints are retargeted to the new checkout, so
its own Rewinds restore there.

Order: every Git and branch check runs in :func:`prepare_worktree_fork` and
again in :func:`commit_worktree_fork` before anything is created (a branch
or directory that exists refuses). Once the worktree exists, a failure
keeps the branch and worktree and raises :class:`WorktreeForkFailed`
carrying the exact cleanup commands. Git runs locally: a workspace on a
remote target is refused.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..targets import Target, TargetError
from .errors import StoreError
from .fork import (
    NO_PLAN_RECORD,
    ChildSession,
    check_fork_point,
    child_snapshot,
    fork_sidecar_changes,
    local_hashes,
    publish_child,
    read_local,
    recheck_source,
)
from .layout import STATE_DIR
from .lease import DEFAULT_LEASE_SECONDS, ClientIdentity
from .lifecycle_token import InvalidToken, LifecycleError, LifecycleRefused, StaleState, StateToken
from .project_files import WORKTREES_DIR, converge_files, local_workspace_root, run_git
from .publication import donors_of
from .rewind import FROM_TARGET, TurnLabel, plan_time
from .sidecar import ForkType, Present, TurnFiles, WorktreeOrigin
from .snapshot_cut import CommittedState, load_committed_state
from .workspace import check_session_id

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ALLOCATION_LIMIT = 1000


class WorktreeForkFailed(LifecycleError):
    """The worktree and branch exist but the fork did not finish: they are
    kept, and ``cleanup`` holds the exact commands that remove them."""

    kind = "unavailable"

    def __init__(self, session_id: str, reason: str, cleanup: Sequence[str]) -> None:
        commands = " && ".join(cleanup)
        super().__init__(
            f"session {session_id}: the worktree fork failed after its worktree was created ({reason}); "
            f"the branch and worktree are kept -- remove them from the workspace with: {commands}"
        )
        self.session_id = session_id
        self.reason = reason
        self.cleanup = tuple(cleanup)


@dataclass(frozen=True)
class WorktreeTarget:
    name: str
    branch: str
    #: Workspace-relative: ``.worktrees/<name>``.
    directory: str
    base_commit: str
    #: The source checkout, workspace-relative (``.`` for the workspace).
    source_checkout: str

    @property
    def cleanup(self) -> tuple[str, ...]:
        return (f"git worktree remove --force {self.directory}", f"git branch -D {self.branch}")


@dataclass(frozen=True)
class PlannedRestore:
    #: Path in the child's checkout, workspace-relative.
    path: str
    content: bytes | None


@dataclass(frozen=True)
class WorktreeForkImpact:
    session_id: str
    response: TurnLabel
    fork_point_id: str
    turns: int
    worktree: WorktreeTarget
    #: Child paths the fork will write (content or removal).
    restores: tuple[str, ...]
    #: Captured paths that keep their HEAD content -> why.
    unrestored: tuple[tuple[str, str], ...]
    #: Captured paths outside the source checkout (stay shared).
    shared: tuple[str, ...]
    local_files: tuple[str, ...]
    plans_note: str
    token: StateToken


@dataclass
class WorktreeForkResult:
    child: ChildSession
    worktree: WorktreeTarget
    restored: tuple[str, ...]
    #: The one-shot report: child paths left at HEAD -> why.
    unrestored: tuple[tuple[str, str], ...]


# Git checks -------------------------------------------------------------------


def _git_line(cwd: Path, session_id: str, *args: str) -> str:
    try:
        done = run_git(cwd, *args)
    except FileNotFoundError:
        raise LifecycleRefused(session_id, "Worktree Fork needs git, which is not installed", kind="unavailable") from None
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise LifecycleRefused(
            session_id, f"git {args[0]} failed: {detail[-1] if detail else 'exit ' + str(done.returncode)}", kind="unavailable"
        )
    return done.stdout.decode("utf-8", "replace").strip()


def _branch_exists(cwd: Path, branch: str) -> bool:
    return run_git(cwd, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}").returncode == 0


def _checkout_of(state: CommittedState) -> str:
    worktree = state.sidecar.worktree
    return worktree.directory if worktree is not None else "."


def _preflight(
    root: Path, session_id: str, checkout: str, name: str | None, branch: str | None, base: str | None = None
) -> WorktreeTarget:
    """Every check before anything is created. Raises LifecycleRefused."""
    source = root if checkout == "." else root / checkout
    try:
        inside = run_git(source, "rev-parse", "--is-inside-work-tree")
    except FileNotFoundError:
        raise LifecycleRefused(session_id, "Worktree Fork needs git, which is not installed", kind="unavailable") from None
    if inside.returncode != 0 or inside.stdout.strip() != b"true":
        raise LifecycleRefused(session_id, "the source checkout is not a Git work tree", kind="conflict")
    _git_line(source, session_id, "worktree", "list", "--porcelain")  # the worktree command works here
    top = Path(_git_line(source, session_id, "rev-parse", "--show-toplevel"))
    if os.path.realpath(top) != os.path.realpath(source):
        raise LifecycleRefused(session_id, "the source checkout is not the top level of its Git work tree", kind="conflict")
    head = run_git(source, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if head.returncode != 0:
        raise LifecycleRefused(session_id, "the source checkout has no HEAD commit to branch from", kind="conflict")
    head_commit = head.stdout.decode("ascii").strip()
    if base is not None and head_commit != base:
        raise StaleState(session_id, [f"the source checkout's HEAD moved from {base[:12]} to {head_commit[:12]}"])
    worktrees = root / WORKTREES_DIR
    if os.path.islink(worktrees):
        raise LifecycleRefused(session_id, f"{WORKTREES_DIR}/ is a symbolic link", kind="conflict")
    if worktrees.exists() and not worktrees.is_dir():
        raise LifecycleRefused(session_id, f"{WORKTREES_DIR} is not a directory", kind="conflict")
    if worktrees.exists() and os.path.dirname(os.path.realpath(worktrees)) != os.path.realpath(root):
        raise LifecycleRefused(session_id, f"{WORKTREES_DIR}/ resolves outside the workspace", kind="conflict")
    if name is None and branch is None:
        name, branch = _allocate(root, source)
    elif name is None or branch is None:
        name = name or (branch or "").rsplit("/", 1)[-1]
        branch = branch or f"mevedel/{name}"
    if not _NAME.match(name):
        raise LifecycleRefused(session_id, f"{name!r} is not a worktree name (letters, digits, '.', '_', '-')", kind="invalid-params")
    valid = run_git(source, "check-ref-format", "--branch", branch)
    if valid.returncode != 0:
        raise LifecycleRefused(session_id, f"{branch!r} is not a valid branch name", kind="invalid-params")
    if _branch_exists(source, branch):
        raise LifecycleRefused(session_id, f"branch {branch} already exists; choose another name", kind="conflict")
    directory = f"{WORKTREES_DIR}/{name}"
    if os.path.lexists(root / directory):
        raise LifecycleRefused(session_id, f"{directory} already exists; choose another name", kind="conflict")
    return WorktreeTarget(name, branch, directory, head_commit, checkout)


def _allocate(root: Path, source: Path) -> tuple[str, str]:
    """The first unused ``fork-N`` directory with an unused ``mevedel/fork-N``
    branch."""
    for number in range(1, _ALLOCATION_LIMIT):
        name = f"fork-{number}"
        if not os.path.lexists(root / WORKTREES_DIR / name) and not _branch_exists(source, f"mevedel/{name}"):
            return name, f"mevedel/{name}"
    raise LifecycleRefused(str(root.name), "no unused worktree name is left", kind="conflict")


# Files ----------------------------------------------------------------------


def _relative(path: str, checkout: str) -> str | None:
    """``path`` relative to the source checkout, when it is repository-local."""
    parts = path.split("/")
    if parts[0] == STATE_DIR or path.startswith("/"):
        return None
    if checkout == ".":
        return None if parts[0] == WORKTREES_DIR else path
    prefix = checkout + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def _files_after(files: Sequence[TurnFiles], turn: int) -> dict[str, tuple[object, int]]:
    """Each captured path's last record at or before ``turn``: (snapshot, turn)."""
    last: dict[str, tuple[object, int]] = {}
    for record in sorted(files, key=lambda r: r.turn):
        if record.turn > turn:
            break
        for path, snapshot in record.files.items():
            last[path] = (snapshot, record.turn)
    return last


def _plan_files(state: CommittedState, turn: int, target: WorktreeTarget):
    restores: list[PlannedRestore] = []
    unrestored: list[tuple[str, str]] = []
    shared: list[str] = []
    for path, (snapshot, recorded) in sorted(_files_after(state.state.files, turn).items()):
        rel = _relative(path, target.source_checkout)
        if rel is None:
            shared.append(path)
            continue
        child = f"{target.directory}/{rel}"
        post = snapshot.post  # type: ignore[attr-defined]
        if post is None:
            why = snapshot.gap if snapshot.pre is None else f"turn {recorded} recorded no post-turn content"  # type: ignore[attr-defined]
            unrestored.append((child, why or "capture gap"))
        elif isinstance(post, Present):
            data = state.state.file_content(post.sha256)
            if data is None:
                unrestored.append((child, f"the captured content of turn {recorded} is unavailable"))
            else:
                restores.append(PlannedRestore(child, data))
        else:
            restores.append(PlannedRestore(child, None))
    return restores, unrestored, shared


def _retarget(target: WorktreeTarget):
    def retarget(path: str) -> str:
        rel = _relative(path, target.source_checkout)
        return path if rel is None else f"{target.directory}/{rel}"

    return retarget


def _root(target: Target, workspace_root: Path | None, session_id: str) -> Path:
    root = local_workspace_root(target) if workspace_root is FROM_TARGET else workspace_root
    if root is None:
        raise LifecycleRefused(session_id, "Worktree Fork runs git locally; this workspace is on a remote target", kind="unavailable")
    return root


# Prepare and commit -------------------------------------------------------------


async def prepare_worktree_fork(
    target: Target,
    session_id: str,
    turn: int,
    *,
    name: str | None = None,
    branch: str | None = None,
    at: int | None = None,
    workspace_root: Path | None = FROM_TARGET,
) -> WorktreeForkImpact:
    """The impact of a Worktree Fork after the response of ``turn``:
    the worktree it will create and the files it will restore."""
    check_session_id(session_id)
    root = _root(target, workspace_root, session_id)
    state = await load_committed_state(target, session_id)
    entry = check_fork_point(state, turn)
    planned = await asyncio.to_thread(_preflight, root, session_id, _checkout_of(state), name, branch)
    restores, unrestored, shared = _plan_files(state, turn, planned)
    local = await read_local(target, state.snapshot.paths, skip_plans=True)
    token = StateToken.make(
        op="worktree-fork",
        session_id=session_id,
        lease_generation=state.snapshot.lease_generation,
        lease_client=state.lease_client,
        head=state.head,
        at=plan_time(state, at),
        subject={
            "turn": turn,
            "fork_point_id": entry.turn_id,
            "name": planned.name,
            "branch": planned.branch,
            "base": planned.base_commit,
        },
        files=local_hashes(local),
    )
    return WorktreeForkImpact(
        session_id,
        TurnLabel.of(entry),
        entry.turn_id,
        entry.turn,
        planned,
        tuple(r.path for r in restores),
        tuple(unrestored),
        tuple(shared),
        tuple(local),
        NO_PLAN_RECORD,
        token,
    )


async def commit_worktree_fork(
    target: Target,
    token: StateToken | str,
    client: ClientIdentity,
    *,
    live_ids: Sequence[str] = (),
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    keep_lease: bool = False,
    workspace_root: Path | None = FROM_TARGET,
) -> WorktreeForkResult:
    """Recheck source, Git and branch, create the worktree, restore its
    files and publish the child."""
    parsed = StateToken.parse(token, "worktree-fork")
    subject = parsed.subject
    name, branch, base = subject.get("name"), subject.get("branch"), subject.get("base")
    if not all(isinstance(v, str) for v in (name, branch, base)):
        raise InvalidToken("it names no worktree")
    root = _root(target, workspace_root, parsed.session_id)
    state, entry, local = await recheck_source(target, parsed)
    planned = await asyncio.to_thread(_preflight, root, parsed.session_id, _checkout_of(state), name, branch, base)  # type: ignore[arg-type]
    restores, unrestored, _shared = _plan_files(state, entry.turn, planned)
    source = root if planned.source_checkout == "." else root / planned.source_checkout
    added = await asyncio.to_thread(
        run_git, source, "worktree", "add", "-q", "-b", planned.branch, str(root / planned.directory), planned.base_commit
    )
    if added.returncode != 0:
        detail = added.stderr.decode("utf-8", "replace").strip().splitlines()
        if not os.path.lexists(root / planned.directory) and not _branch_exists(source, planned.branch):
            raise LifecycleRefused(parsed.session_id, f"git worktree add failed: {detail[-1] if detail else 'no detail'}", kind="unavailable")
        raise WorktreeForkFailed(parsed.session_id, f"git worktree add failed: {detail[-1] if detail else 'no detail'}", planned.cleanup)
    try:
        wanted = {r.path: r.content for r in restores}
        outcome = await converge_files(target, wanted)
        report = list(unrestored) + sorted(outcome.failed.items())
        written = tuple(p for p in wanted if p not in outcome.failed)
        origin = WorktreeOrigin(
            source_root=planned.source_checkout, directory=planned.directory, branch=planned.branch, base_commit=planned.base_commit
        )
        build = child_snapshot(
            state,
            entry,
            lambda child_id, at: fork_sidecar_changes(state, child_id, entry, ForkType.WORKTREE, at, origin),
            retarget=_retarget(planned),
        )
        child = await publish_child(
            target,
            client,
            build,
            at=parsed.at,
            local_files=local,
            live_ids=live_ids,
            lease_seconds=lease_seconds,
            keep_lease=keep_lease,
            donors=donors_of(state.snapshot),
        )
    except (StoreError, TargetError) as error:
        raise WorktreeForkFailed(parsed.session_id, str(error), planned.cleanup) from error
    return WorktreeForkResult(child, planned, written, tuple(sorted(report)))
