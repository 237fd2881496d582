"""Project working-tree files a lifecycle transaction reads and restores.

Every read and write of a project file goes through the session store's
:class:`~mevedel_server.targets.Target`, which is rooted at the workspace:
paths here are workspace-relative target paths, and a symlinked path fails
closed in the target. Paths inside ``.mevedel/`` (the store itself) are never
project files.

- :func:`read_project_files` reads many paths' whole states in one program
  (:class:`~mevedel_server.targets.Entry`: kind, permission bits, bytes or
  link target; absent paths are ``None``; a FIFO, socket or device is
  reported with its reason instead). Links are read, never followed.
- :func:`converge_files` brings paths to wanted states: it reads them, and
  gives each that differs its state (a file by atomic replace with its
  exact mode, a link relinked, a directory made or removed or re-moded,
  removal for an absent state) in programs that start with the caller's
  guard operations (the lease proof). Reading first makes it safe to call after a program
  whose effect is unknown: a rollback converges to the old content whatever
  part of the restore ran -- and, told which states the restore writes,
  leaves a path holding any other (someone else's edit) as it is.
- :func:`index_divergence` asks the real ``git`` where the workspace is
  (this machine, or an SSH target's host: :mod:`.git_runner`) which paths'
  index content will differ from the restored working tree.

A restored file gets exactly the permission bits its checkpoint recorded
(umask ignored); one recorded before modes were (``mode`` None) keeps the
mode it has now, or gets the default (0644 less the umask) when it is
created.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...targets import (
    Barrier,
    ControlProgram,
    Entry,
    InvalidTargetPath,
    Operation,
    OpResult,
    PutEntry,
    ReadEntry,
    Stat,
    Status,
    Target,
    TargetError,
    same_state,
    split_target_path,
)
from ..layout import STATE_DIR
from .git_runner import GitDidNotFinish, GitMissing, GitRunner

#: Where linked worktrees of Worktree Forks live, inside the workspace.
WORKTREES_DIR = ".worktrees"
#: A target program carries at most this many file operations.
_BATCH = 256


@dataclass(frozen=True)
class Unreadable:
    """A project path that exists but cannot be read (a FIFO, a socket, a
    device, an I/O failure)."""

    reason: str


#: A path's whole state: an Entry (file, directory or link), None (absent).
FileRead = Entry | None | Unreadable


def project_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a project file, or None when it can."""
    try:
        parts = split_target_path(path)
    except InvalidTargetPath as invalid:
        return f"it is not a workspace-relative path ({invalid.reason})"
    if not parts:
        return "it names the workspace itself"
    if parts[0] == STATE_DIR:
        return f"it is inside {STATE_DIR}/, which holds mevedel's own state"
    return None


#: Runs the first batch of reads in a program of the caller's (beside reads
#: of its own), and returns their results.
FirstReads = Callable[[Sequence[Operation]], Awaitable[Sequence[OpResult]]]


async def read_project_files(target: Target, paths: Iterable[str], *, first: FirstReads | None = None) -> dict[str, FileRead]:
    """The current state of each path (never followed): an Entry, None
    (absent) or Unreadable. ``first`` runs the first batch of reads in a
    program of the caller's (beside reads of its own)."""
    wanted = list(dict.fromkeys(paths))
    out: dict[str, FileRead] = {}
    for start in range(0, max(len(wanted), 1), _BATCH):
        chunk = wanted[start : start + _BATCH]
        ops = [ReadEntry(p, optional=True) for p in chunk]
        if start == 0 and first is not None:
            result = await first(ops)
        elif not ops:
            break
        else:
            result = (await target.run(ControlProgram(ops))).results
        for path, op_result in zip(chunk, result):
            if op_result.ok:
                out[path] = op_result.value
            elif op_result.status is Status.ABSENT:
                out[path] = None
            else:
                out[path] = Unreadable(op_result.reason or op_result.status.value)
    return out


@dataclass(frozen=True)
class ConvergeOutcome:
    #: Paths this call wrote or removed.
    written: tuple[str, ...]
    #: Paths that still do not hold their wanted content -> why.
    failed: Mapping[str, str]
    #: The guard stopped the program before anything was written.
    guard_refused: str | None = None
    #: Paths holding a state the caller's own writes never give them
    #: (someone else's): left as they are.
    left: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.failed and self.guard_refused is None


#: (path, its state now, the state to give it).
Change = tuple[str, "Entry | None", "Entry | None"]


def _is_dir(entry: Entry | None) -> bool:
    return entry is not None and entry.kind == Entry.DIRECTORY


def ordered_steps(changes: Sequence[Change]) -> list[tuple[str, Entry | None, Entry | None]]:
    """The :class:`PutEntry` steps that make ``changes``, in an order that
    always works: first every removal (and every directory that gives way
    to another kind), deepest first, so a directory is empty when it goes;
    then every creation and change, shallowest first, so a parent exists
    before what it holds -- a directory whose mode denies its owner writing
    is made writable until everything below it is done, then given its
    mode in a last pass, deepest first."""
    removals, puts, closing = [], [], []
    for path, before, after in changes:
        depth = path.count("/")
        if after is None or (_is_dir(before) and not _is_dir(after)):
            removals.append((-depth, path, before, None))
            if after is not None:
                puts.append((depth, path, None, after))
            continue
        if _is_dir(after) and after.mode is not None and after.mode & 0o700 != 0o700:
            open_mode = Entry.directory(after.mode | 0o700)
            puts.append((depth, path, before, open_mode))
            closing.append((-depth, path, open_mode, after))
        else:
            puts.append((depth, path, before, after))
    return [step[1:] for group in (removals, puts, closing) for step in sorted(group, key=lambda s: (s[0], s[1]))]


async def write_files(target: Target, changes: Sequence[Change], guard: Sequence[Operation] = ()) -> ConvergeOutcome:
    """Give each ``(path, state now, state wanted)`` its wanted state: each
    step a :class:`PutEntry` conditional on the state just read (a path
    changed in between stops the program), in the order of
    :func:`ordered_steps`, in programs opened by the ``guard`` operations
    and closed by one barrier that flushes all their writes (a path counts
    as written only once it is flushed). A guard that fails stops its
    program before any write."""
    written: dict[str, None] = {}
    failed: dict[str, str] = {}
    steps = ordered_steps(changes)
    for start in range(0, len(steps), _BATCH):
        chunk = steps[start : start + _BATCH]
        ops: list[Operation] = list(guard)
        ops += [PutEntry(path, before, after, deferred=True) for path, before, after in chunk]
        # A program a failed step stops never reaches its barrier: what it
        # wrote before the failure is reported written but left unflushed,
        # for the caller's rollback or retry (its own barrier) to settle.
        ops.append(Barrier())
        result = await target.run(ControlProgram(ops))
        if result.stopped_at is not None and result.stopped_at < len(guard):
            stopped = result[result.stopped_at]
            return ConvergeOutcome(tuple(written), failed, stopped.reason or stopped.status.value)
        flush = result[len(ops) - 1]
        if flush.status is Status.FAILED:
            for path, _before, _after in chunk:
                failed[path] = f"not flushed to disk: {flush.reason or flush.status.value}"
            continue
        for (path, _before, _after), op_result in zip(chunk, result.results[len(guard) :]):
            if op_result.ok:
                written[path] = None
            elif path not in failed:
                if op_result.status is Status.SKIPPED:
                    failed[path] = "not written: an earlier write of the same program failed"
                else:
                    failed[path] = op_result.reason or op_result.status.value
    return ConvergeOutcome(tuple(p for p in written if p not in failed), failed)


async def converge_files(
    target: Target, wanted: Mapping[str, Entry | None], guard: Sequence[Operation] = (), *, first: FirstReads | None = None,
    ours: Mapping[str, Sequence[Entry | None]] | None = None,
) -> ConvergeOutcome:
    """Give every path its wanted state (None: absent), writing only the
    paths whose current state differs (see :func:`write_files`). ``first``:
    see :func:`read_project_files`. ``ours``: the states the caller's own
    writes may have given each path; one holding any other state is
    someone else's change, left as it is (``left``), never overwritten."""
    current = await read_project_files(target, wanted, first=first)
    failed: dict[str, str] = {}
    pending: list[Change] = []
    left: list[str] = []
    for path, state in wanted.items():
        now = current[path]
        if isinstance(now, Unreadable):
            failed[path] = now.reason
        elif same_state(now, state):
            continue
        elif ours is not None and not any(same_state(now, mine) for mine in ours.get(path, ())):
            left.append(path)
        else:
            pending.append((path, now, state))
    outcome = await write_files(target, pending, guard)
    return ConvergeOutcome(outcome.written, {**failed, **outcome.failed}, outcome.guard_refused, tuple(left))


def git_contents(states: Mapping[str, Entry | None]) -> dict[str, bytes | None]:
    """What Git's index would hold for each restored path: a file's bytes,
    a link's target, None for none (directories are not in the index)."""
    return {p: (None if e is None else e.data) for p, e in states.items() if not _is_dir(e)}


# Git ----------------------------------------------------------------------


@dataclass(frozen=True)
class IndexDivergence:
    """A path whose Git index entry will differ from the restored file."""

    path: str
    #: The index's blob id (stage 0, or the first conflict stage).
    index_blob: str
    #: The restored content's blob id; None when the restore removes the file.
    restored_blob: str | None


@dataclass(frozen=True)
class GitCheck:
    #: ``checked``, ``no-repository``, ``unavailable`` (git missing or
    #: failing) or ``not-local`` (git cannot be run where the workspace is);
    #: ``not-checked`` in the impact of a prepare at once, never shown.
    status: str
    divergent: tuple[IndexDivergence, ...] = ()
    detail: str | None = None


def blob_id(content: bytes, object_format: str = "sha1") -> str:
    """The Git blob object id of ``content``."""
    digest = hashlib.sha256() if object_format == "sha256" else hashlib.sha1()
    digest.update(b"blob %d\x00" % len(content))
    digest.update(content)
    return digest.hexdigest()


async def _checkouts(target: Target, paths: Sequence[str]) -> dict[str, list[str]]:
    """Group workspace-relative paths by the checkout holding them: a
    linked worktree under ``.worktrees/<name>/`` (it has its own index) or
    the workspace itself (``""``)."""
    candidates = sorted({"/".join(p.split("/")[:2]) for p in paths if len(p.split("/")) > 2 and p.split("/")[0] == WORKTREES_DIR})
    linked: set[str] = set()
    for start in range(0, len(candidates), _BATCH):
        chunk = candidates[start : start + _BATCH]
        # A linked worktree's ``.git`` is a file naming its own index.
        result = await target.run(ControlProgram([Stat(f"{c}/.git", optional=True) for c in chunk]))
        linked.update(c for c, stat in zip(chunk, result) if stat.ok)
    groups: dict[str, list[str]] = {}
    for path in paths:
        checkout = "/".join(path.split("/")[:2])
        groups.setdefault(checkout if checkout in linked else "", []).append(path)
    return groups


async def _index_of(git: GitRunner, cwd: str, paths: Sequence[str]) -> tuple[str | None, dict[str, str], str | None]:
    """(object format, path -> staged blob id, problem) for paths relative
    to ``cwd``; a None format means ``cwd`` is in no repository."""
    inside = await git.run(cwd, "rev-parse", "--is-inside-work-tree", "--show-object-format")
    lines = inside.stdout.decode("utf-8", "replace").split()
    if inside.returncode != 0 or not lines or lines[0] != "true":
        return None, {}, None
    object_format = lines[1] if len(lines) > 1 else "sha1"
    index: dict[str, str] = {}
    # Batched so a long restore never exceeds a command line's length.
    for start in range(0, len(paths), _BATCH):
        listed = await git.run(cwd, "ls-files", "-s", "-z", "--", *paths[start : start + _BATCH])
        if listed.returncode != 0:
            return object_format, {}, listed.stderr.decode("utf-8", "replace").strip()[:200]
        for record in listed.stdout.split(b"\x00"):
            meta, _, name = record.partition(b"\t")
            fields = meta.split()
            if len(fields) == 3:
                # Keep the first stage listed (0, or 1 in a conflict).
                index.setdefault(name.decode("utf-8", "surrogateescape"), fields[1].decode("ascii"))
    return object_format, index, None


async def index_divergence(git: GitRunner | None, target: Target, restored: Mapping[str, bytes | None]) -> GitCheck:
    """Paths whose Git index content differs from the content a restore
    gives them (a removed file diverges from any index entry it has), asked
    of the git where the workspace is (``git``; None checks nothing).
    ``target`` is the workspace's target, for finding linked worktrees."""
    if git is None:
        return GitCheck("not-local", detail="git cannot be run where this workspace is")
    restored = dict(restored)
    divergent = []
    any_repository = False
    try:
        for checkout, paths in sorted((await _checkouts(target, sorted(restored))).items()):
            prefix = checkout + "/" if checkout else ""
            local = [p[len(prefix) :] for p in paths]
            object_format, index, problem = await _index_of(git, checkout or ".", local)
            if problem is not None:
                return GitCheck("unavailable", detail=problem)
            if object_format is None:
                continue
            any_repository = True
            for path, rel in zip(paths, local):
                staged = index.get(rel)
                if staged is None:
                    continue
                content = restored[path]
                restored_blob = None if content is None else blob_id(content, object_format)
                if restored_blob != staged:
                    divergent.append(IndexDivergence(path, staged, restored_blob))
        if not restored:
            object_format, _index, _problem = await _index_of(git, ".", [])
            any_repository = object_format is not None
    except GitMissing:
        return GitCheck("unavailable", detail="git is not installed")
    except (GitDidNotFinish, TargetError) as exc:
        return GitCheck("unavailable", detail=f"git did not run ({exc})")
    if not any_repository:
        return GitCheck("no-repository")
    return GitCheck("checked", tuple(divergent))
