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
or directory that exists refuses). Once git has created the branch or the
worktree, a failure keeps what it created and raises
:class:`WorktreeForkFailed` carrying the exact cleanup commands for just
that.

Git runs where the workspace's files are (:mod:`.git_runner`): a subprocess
for a local workspace, ``git`` on the host of an SSH workspace, always in a
workspace-relative directory with workspace-relative arguments, so the
answers, refusals and messages are the same on both and never show where
the workspace is backed. Filesystem checks (``.worktrees/``, the source
checkout) go through the workspace target, which refuses symbolic links.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ...targets import (
    ControlProgram,
    Entry,
    ListDir,
    Operation,
    Stat,
    Status,
    Target,
    TargetError,
    split_target_path,
)
from ..authority.lease import DEFAULT_LEASE_SECONDS, ClientIdentity
from ..authority.publication import donors_of
from ..content.checkpoints import MissingContent, entry_of
from ..content.sidecar import ForkType, TurnFiles, WorktreeOrigin, agent_history_note
from ..errors import OutcomeUnknown, SessionRefusal, StoreError, cause_in_words
from ..layout import STATE_DIR
from .fork import (
    NO_PLAN_RECORD,
    ChildOptions,
    ChildSession,
    check_fork_point,
    child_snapshot,
    fork_sidecar_changes,
    local_file_names,
    local_hashes,
    publish_child,
    read_local,
    recheck_source,
)
from .git_runner import (
    GitDidNotFinish,
    GitMissing,
    GitOutcome,
    GitRunner,
    git_runner_for,
)
from .lifecycle_token import (
    InvalidToken,
    LifecycleError,
    LifecycleRefused,
    StaleState,
    StateToken,
)
from .project_files import WORKTREES_DIR, converge_files
from .snapshot_cut import CommittedState
from .two_phase import (
    Source,
    TurnLabel,
    commit,
    committed_state,
    issue_token,
    parse_token,
    plan_time,
    prepare,
)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_ALLOCATION_LIMIT = 1000
#: Seconds ``git worktree add`` may take: it checks out the whole tree.
_ADD_TIMEOUT = 600


class WorktreeForkFailed(LifecycleError, SessionRefusal):
    """Git created the branch, the worktree or both, but the fork did not
    finish: what exists is kept, and ``cleanup`` holds the exact commands
    that remove it (and nothing else)."""

    kind = "unavailable"

    def __init__(self, session_id: str, reason: str, cleanup: Sequence[str], *, unknown: OutcomeUnknown | None = None) -> None:
        commands = " && ".join(cleanup)
        if unknown is not None:
            # The new session may hold the worktree: removing it is advice
            # only for a fork that was not made.
            told = unknown.said if unknown.session_id == session_id else str(unknown)
            said = f"{told}; if it is not there, what git created is kept -- remove it from the workspace with: {commands}"
        else:
            said = (
                f"the worktree fork failed after git created part of it ({reason}); "
                f"what it created is kept -- remove it from the workspace with: {commands}"
            )
        SessionRefusal.__init__(self, session_id, said)
        #: What resolves an unknown outcome (as :class:`OutcomeUnknown`'s).
        self.follow_up = unknown.follow_up if unknown is not None else None
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
    #: The whole state it gets (kind, mode, bytes or link target); None: absent.
    content: Entry | None


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
    #: What happens to the agent's own history (None: there is none).
    agent_history: str | None = None


@dataclass
class WorktreeForkResult:
    child: ChildSession
    worktree: WorktreeTarget
    restored: tuple[str, ...]
    #: The one-shot report: child paths left at HEAD -> why.
    unrestored: tuple[tuple[str, str], ...]


# Git checks -------------------------------------------------------------------

_NO_GIT = "Worktree Fork needs git, which is not installed"


async def _git(git: GitRunner, session_id: str, cwd: str, *args: str) -> GitOutcome:
    """Run git for a check: git missing, or a git that did not finish, is
    a refusal (a dropped SSH connection stays a ``TargetUnavailable``)."""
    try:
        return await git.run(cwd, *args)
    except GitMissing:
        raise LifecycleRefused(session_id, _NO_GIT, kind="unavailable") from None
    except GitDidNotFinish as exc:
        raise LifecycleRefused(session_id, f"git {args[0]} did not run: {exc}", kind="unavailable") from None


async def _git_line(git: GitRunner, session_id: str, cwd: str, *args: str) -> str:
    done = await _git(git, session_id, cwd, *args)
    if not done.ok:
        raise LifecycleRefused(session_id, f"git {args[0]} failed: {done.last_error_line()}", kind="unavailable")
    return done.stdout.decode("utf-8", "replace").strip()


async def _branches(git: GitRunner, session_id: str, cwd: str, prefix: str) -> set[str]:
    """The branch names under ``refs/heads/<prefix>``."""
    listed = await _git_line(git, session_id, cwd, "for-each-ref", "--format=%(refname)", f"refs/heads/{prefix}")
    return {line.removeprefix("refs/heads/") for line in listed.splitlines()}


async def _branch_exists(git: GitRunner, session_id: str, cwd: str, branch: str) -> bool:
    return (await _git(git, session_id, cwd, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")).ok


def _checkout_of(state: CommittedState) -> str:
    worktree = state.sidecar.worktree
    return worktree.directory if worktree is not None else "."


@dataclass(frozen=True)
class _Places:
    """What the workspace target says of the source checkout and of
    ``.worktrees/`` (it refuses symbolic links on the way)."""

    #: Why the source checkout cannot be used, or None.
    source_problem: LifecycleRefused | None
    #: Why ``.worktrees/`` cannot hold a new worktree, or None.
    worktrees_problem: LifecycleRefused | None
    #: The names in ``.worktrees/`` (none when it does not exist yet).
    entries: frozenset[str]


async def _places(target: Target, session_id: str, checkout: str) -> _Places:
    ops: list[Operation] = [Stat(WORKTREES_DIR, optional=True), ListDir(WORKTREES_DIR, optional=True)]
    if checkout != ".":
        ops.append(Stat(checkout, optional=True))
    result = await target.run(ControlProgram(ops))
    source_problem = worktrees_problem = None
    if checkout != ".":
        source = result[2]
        if source.status is Status.ABSENT or (source.ok and source.value.kind != "directory"):
            source_problem = LifecycleRefused(session_id, f"the source checkout {checkout} is not a directory", kind="conflict")
        elif not source.ok:
            source_problem = LifecycleRefused(session_id, f"the source checkout {checkout} cannot be used ({source.reason})", kind="conflict")
    stat, listing = result[0], result[1]
    entries: frozenset[str] = frozenset()
    if stat.status is Status.ABSENT:
        pass
    elif stat.unsafe:
        worktrees_problem = LifecycleRefused(session_id, f"{WORKTREES_DIR}/ is a symbolic link", kind="conflict")
    elif stat.ok and stat.value.kind != "directory":
        worktrees_problem = LifecycleRefused(session_id, f"{WORKTREES_DIR} is not a directory", kind="conflict")
    elif not stat.ok or not listing.ok:
        reason = (stat if not stat.ok else listing).reason
        worktrees_problem = LifecycleRefused(session_id, f"{WORKTREES_DIR}/ cannot be read ({reason})", kind="unavailable")
    else:
        entries = frozenset(listing.value)
    return _Places(source_problem, worktrees_problem, entries)


async def _preflight(
    target: Target, git: GitRunner, session_id: str, checkout: str, name: str | None, branch: str | None, base: str | None = None
) -> WorktreeTarget:
    """Every check before anything is created. Raises LifecycleRefused."""
    places = await _places(target, session_id, checkout)
    if places.source_problem is not None:
        # git would run in a directory that is not there (or is a link).
        raise places.source_problem
    inside = await _git(git, session_id, checkout, "rev-parse", "--is-inside-work-tree", "--show-toplevel", "--show-cdup")
    lines = inside.stdout.decode("utf-8", "surrogateescape").split("\n")
    if not inside.ok or len(lines) < 4 or lines[0] != "true":
        raise LifecycleRefused(session_id, "the source checkout is not a Git work tree", kind="conflict")
    await _git_line(git, session_id, checkout, "worktree", "list", "--porcelain")  # the worktree command works here
    # --show-cdup is the way up to the top level, empty at the top: relative,
    # so the judgement never needs the absolute path git runs in (on an SSH
    # host, the pinned root's, which no message may show).
    top, cdup = "\n".join(lines[1:-2]), lines[-2]
    if cdup:
        raise LifecycleRefused(session_id, "the source checkout is not the top level of its Git work tree", kind="conflict")
    # git reports the top level with symbolic links resolved: that spelling
    # of the workspace root must not appear in its messages either.
    depth = len(split_target_path(checkout))
    git.learn_root_spelling(top.rsplit("/", depth)[0] if depth else top)
    head = await _git(git, session_id, checkout, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if not head.ok:
        raise LifecycleRefused(session_id, "the source checkout has no HEAD commit to branch from", kind="conflict")
    head_commit = head.stdout.decode("ascii").strip()
    if base is not None and head_commit != base:
        raise StaleState(session_id, [f"the source checkout's HEAD moved from {base[:12]} to {head_commit[:12]}"])
    if places.worktrees_problem is not None:
        raise places.worktrees_problem
    entries = places.entries
    if name is None and branch is None:
        name, branch = _allocate(session_id, entries, await _branches(git, session_id, checkout, "mevedel/"))
    elif name is None or branch is None:
        name = name or (branch or "").rsplit("/", 1)[-1]
        branch = branch or f"mevedel/{name}"
    if not _NAME.match(name):
        raise LifecycleRefused(session_id, f"{name!r} is not a worktree name (letters, digits, '.', '_', '-')", kind="invalid-params")
    valid = await _git(git, session_id, checkout, "check-ref-format", "--branch", branch)
    if not valid.ok:
        raise LifecycleRefused(session_id, f"{branch!r} is not a valid branch name", kind="invalid-params")
    if await _branch_exists(git, session_id, checkout, branch):
        raise LifecycleRefused(session_id, f"branch {branch} already exists; choose another name", kind="conflict")
    directory = f"{WORKTREES_DIR}/{name}"
    if name in entries:
        raise LifecycleRefused(session_id, f"{directory} already exists; choose another name", kind="conflict")
    return WorktreeTarget(name, branch, directory, head_commit, checkout)


def _allocate(session_id: str, entries: frozenset[str], branches: set[str]) -> tuple[str, str]:
    """The first unused ``fork-N`` directory with an unused ``mevedel/fork-N``
    branch."""
    for number in range(1, _ALLOCATION_LIMIT):
        name = f"fork-{number}"
        if name not in entries and f"mevedel/{name}" not in branches:
            return name, f"mevedel/{name}"
    raise LifecycleRefused(session_id, "no unused worktree name is left", kind="conflict")


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
        else:
            try:
                restores.append(PlannedRestore(child, entry_of(post, state.state.file_content)))
            except MissingContent:
                unrestored.append((child, f"the captured content of turn {recorded} is unavailable"))
    return restores, unrestored, shared


def _retarget(target: WorktreeTarget):
    def retarget(path: str) -> str:
        rel = _relative(path, target.source_checkout)
        return path if rel is None else f"{target.directory}/{rel}"

    return retarget


def _git_for(target: Target, git: GitRunner | None, session_id: str) -> GitRunner:
    git = git or git_runner_for(target)
    if git is None:
        raise LifecycleRefused(session_id, "Worktree Fork cannot run git where this workspace is", kind="unavailable")
    return git


async def _left_behind(target: Target, git: GitRunner, planned: WorktreeTarget) -> tuple[str, ...]:
    """The cleanup commands for what a failed ``worktree add`` left: for
    the worktree directory if it exists, for the branch if it exists (git
    creates the branch before it may refuse the directory); both when that
    cannot be found out, none when nothing was created. A command for
    something absent is never named: removing ``.worktrees/NAME`` when git
    refused it could unregister a worktree the user made there."""
    try:
        result = await target.run(ControlProgram([Stat(planned.directory, optional=True)]))
        shown = await git.run(planned.source_checkout, "show-ref", "--verify", "--quiet", f"refs/heads/{planned.branch}")
    except (TargetError, GitMissing, GitDidNotFinish):
        return planned.cleanup
    if shown.returncode not in (0, 1) or result[0].status not in (Status.OK, Status.ABSENT):
        return planned.cleanup
    remove_worktree, delete_branch = planned.cleanup
    kept = []
    if result[0].status is Status.OK:
        kept.append(remove_worktree)
    if shown.returncode == 0:
        kept.append(delete_branch)
    return tuple(kept)


# Prepare and commit -------------------------------------------------------------


@dataclass(frozen=True)
class WorktreeFork:
    """A Worktree Fork after the response of ``turn`` into a worktree
    ``name`` on ``branch`` (None: chosen), as a plan of the two-phase
    skeleton; ``git`` runs git where the workspace is (by default chosen
    from the target); ``child``: how its commit opens the child."""

    op: ClassVar[str] = "worktree-fork"
    turn: int
    name: str | None = None
    branch: str | None = None
    at: int | None = None
    git: GitRunner | None = None
    child: ChildOptions | None = None

    async def prepare(self, source: Source) -> WorktreeForkImpact:
        target, session_id, turn = source.target, source.session_id, self.turn
        git = _git_for(target, self.git, session_id)
        state = await committed_state(source)
        entry = check_fork_point(state, turn)
        planned = await _preflight(target, git, session_id, _checkout_of(state), self.name, self.branch)
        restores, unrestored, shared = _plan_files(state, turn, planned)
        local = await read_local(target, state.snapshot.paths, skip_plans=True)
        subject = {"turn": turn, "fork_point_id": entry.turn_id, "name": planned.name, "branch": planned.branch, "base": planned.base_commit}
        token = issue_token(self.op, state, plan_time(state, self.at), subject, local_hashes(local))
        return WorktreeForkImpact(
            session_id,
            TurnLabel.of(entry),
            entry.turn_id,
            entry.turn,
            planned,
            tuple(r.path for r in restores),
            tuple(unrestored),
            tuple(shared),
            local_file_names(local),
            NO_PLAN_RECORD,
            token,
            agent_history_note(state.sidecar.engine, copy=True),
        )

    @classmethod
    def from_token(cls, token: StateToken, *, child: ChildOptions, git: GitRunner | None = None) -> WorktreeFork:
        subject = token.subject
        name, branch, base = subject.get("name"), subject.get("branch"), subject.get("base")
        if not all(isinstance(v, str) for v in (name, branch, base)):
            raise InvalidToken("it names no worktree")
        return cls(subject.get("turn"), name, branch, token.at, git, child)  # type: ignore[arg-type]

    async def commit(self, source: Source, token: StateToken) -> WorktreeForkResult:
        """Recheck source, Git and branch, create the worktree, restore its
        files and publish the child."""
        assert self.child is not None
        target, parsed, client = source.target, token, self.child.client
        name, branch, base = self.name, self.branch, parsed.subject.get("base")
        git = _git_for(target, self.git, parsed.session_id)
        state, entry, local = await recheck_source(target, parsed)
        planned = await _preflight(target, git, parsed.session_id, _checkout_of(state), name, branch, base)  # type: ignore[arg-type]
        restores, unrestored, _shared = _plan_files(state, entry.turn, planned)
        # Relative to the source checkout git runs in: no absolute path of the
        # workspace reaches git's arguments (or its messages).
        directory = posixpath.relpath(planned.directory, planned.source_checkout)
        try:
            added = await git.run(
                planned.source_checkout, "worktree", "add", "-q", "-b", planned.branch, directory, planned.base_commit, timeout=_ADD_TIMEOUT
            )
            failure = None if added.ok else f"git worktree add failed: {added.last_error_line('no detail')}"
        except GitMissing:
            raise LifecycleRefused(parsed.session_id, _NO_GIT, kind="unavailable") from None
        except (GitDidNotFinish, TargetError) as exc:
            failure = f"git worktree add did not report its outcome: {exc}"
        if failure is not None:
            left = await _left_behind(target, git, planned)
            if not left:
                raise LifecycleRefused(parsed.session_id, failure, kind="unavailable")
            raise WorktreeForkFailed(parsed.session_id, failure, left)
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
                donors=donors_of(state.snapshot),
                source=(parsed.session_id, "worktree fork"),
                **self.child.opening,
            )
        except OutcomeUnknown as unknown:
            raise WorktreeForkFailed(parsed.session_id, str(unknown), planned.cleanup, unknown=unknown) from unknown
        except (StoreError, TargetError) as error:
            raise WorktreeForkFailed(parsed.session_id, cause_in_words(parsed.session_id, error), planned.cleanup) from error
        return WorktreeForkResult(child, planned, written, tuple(sorted(report)))


async def prepare_worktree_fork(
    target: Target,
    session_id: str,
    turn: int,
    *,
    name: str | None = None,
    branch: str | None = None,
    at: int | None = None,
    git: GitRunner | None = None,
) -> WorktreeForkImpact:
    """The impact of a Worktree Fork after the response of ``turn``:
    the worktree it will create and the files it will restore."""
    return await prepare(WorktreeFork(turn, name, branch, at, git), Source(target, session_id))


async def commit_worktree_fork(
    target: Target,
    token: StateToken | str,
    client: ClientIdentity,
    *,
    live_ids: Sequence[str] = (),
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    keep_lease: bool = False,
    git: GitRunner | None = None,
) -> WorktreeForkResult:
    """Recheck source, Git and branch, create the worktree, restore its
    files and publish the child."""
    parsed = parse_token(token, (WorktreeFork.op,))
    child = ChildOptions(client, live_ids, lease_seconds, keep_lease)
    return await commit(WorktreeFork, Source(target, parsed.session_id), parsed, child=child, git=git)
