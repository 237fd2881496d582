"""The in-place transaction Rewind and Redo share: restore the project
files a plan names and replace the session's snapshot, under the held lease.

A plan (:class:`InPlacePlan`) is the complete replacement snapshot, the
whole state of every project path it restores and the checkpoint each comes
from. :func:`survey_files` reads the working tree for the impact (the
token's hashes, the restore rows, the files changed outside the session and
the Git index check); a prepare at once (``--yes``, ``Source.at_once``:
nobody sees the impact) reads nothing and expects each path to hold the
state the session last recorded for it after a turn
(:func:`predicted_files`). :func:`commit_in_place` rechecks the token (the
lease and head unmoved, every file's content hash the same;
:class:`~.lifecycle_token.StaleState` otherwise; at once, with the
prepare's own reads or predictions) and then, in ONE program behind the
lease's proof:

1. checks that every path holds the state it expects (nothing written
   otherwise: refused as stale, or -- a prediction that was wrong -- read
   and made again over what is there);
2. journals the file changes (:mod:`.recovery`: repair bytes, then marker);
3. restores the project files, each write conditional on that state;
4. publishes ONE complete replacement snapshot (``replace=True``) over the
   same head -- the commit point -- its barrier flushing the files too;
5. removes the journal (riding after the head: if it does not run, it is
   removed in a program of its own, or by a retried recovery).

Any failure before the commit point rolls the files back (and drops the
pending publication); a rollback that cannot finish leaves the marker,
which blocks the session until :func:`~.recovery.retry_recovery` or
:func:`~.recovery.abandon_recovery`. The session keeps its ID, name,
directory, lineage, settings and attachments; ``local/`` is not touched.
Every write is behind the lease's proof (:func:`~.recovery.lease_proof`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...targets import (
    ControlProgram,
    Entry,
    Operation,
    OpResult,
    PutEntry,
    Status,
    Target,
    TargetError,
    TargetUnavailable,
    same_state,
)
from ..authority.lease import LeadStopped, LeaseHandle, read_lease_head
from ..authority.publication import Publisher, load_manifest
from ..authority.records import RecordError
from ..content.checkpoints import MissingContent, entry_of, restore_plan
from ..content.sidecar import (
    Absent,
    Directory,
    FileState,
    Present,
    Symlink,
    TurnFiles,
)
from ..errors import (
    LeaseLost,
    OutcomeUnknown,
    PublicationFailed,
    PublicationPending,
    PublicationUnknown,
    SessionRefusal,
    StoreError,
    cause_in_words,
    target_error_in,
)
from .git_runner import GitRunner, LocalGit, git_runner_for
from .lifecycle_token import (
    InvalidToken,
    LifecycleError,
    LifecycleRefused,
    StaleState,
    StateToken,
    content_hash,
    moved_files,
)
from .project_files import (
    FileRead,
    GitCheck,
    Unreadable,
    git_contents,
    index_divergence,
    ordered_steps,
    project_path_problem,
    read_project_files,
)
from .recovery import (
    GUARD_ATTEMPTS,
    RecoveryRequired,
    RecoveryState,
    journal_ops,
    lease_proof,
    marker_held,
    marker_read,
    marker_removed,
    new_journal,
    removal_ops,
    run_guarded,
    settle_files,
    snapshot_digest,
    sweep_ops,
)
from .snapshot_cut import (
    CommittedSnapshotResult,
    CommittedState,
    LazyConversation,
    SessionState,
    Side,
    state_at_head,
)
from .two_phase import Source, gate_reads, refuse_live

#: Passed as ``workspace_root`` to ask the git where the target keeps its files.
FROM_TARGET = Path("<from target>")
_PLAN_LIMIT = 4


@dataclass(frozen=True)
class FileRestore:
    path: str
    #: ``present`` (a regular file), ``absent``, ``directory`` or ``symlink``.
    state: str
    sha256: str | None
    size: int | None
    #: ``pre-turn`` or ``post-turn`` (Redo: also ``restored head``).
    checkpoint: str
    #: The turn whose checkpoint it is.
    turn: int
    #: The working tree differs from it now, so the restore writes it.
    changes: bool
    #: What the restore does to it (see :func:`restore_action`).
    action: str = "restore"
    #: The permission bits it gets (None: a link, or a checkpoint that
    #: recorded none); a link's target text.
    mode: int | None = None
    link_target: str | None = None
    #: Rewind: the retained sub-agents (paths) whose tasks in the discarded
    #: turns changed it (their writes, patches and commands).
    agents: tuple[str, ...] = ()


@dataclass(frozen=True)
class KnownGap:
    path: str
    turn: int
    reason: str


@dataclass(frozen=True)
class ExternalChange:
    """A captured file whose working-tree content differs from the last
    content a turn recorded for it after running."""

    path: str
    recorded_turn: int


class InPlaceResult(CommittedSnapshotResult):
    """What an in-place replacement committed."""

    def __init__(
        self,
        session_id: str,
        committed: bool,
        head: str | None,
        lazy: LazyConversation,
        written: tuple[str, ...],
        warning: str | None = None,
        actions: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(lazy)
        self.session_id = session_id
        #: A new head was committed.
        self.committed = committed
        self.head = head
        #: Project paths written (restored, removed, re-moded, relinked).
        self.written = written
        #: What was done to each (see :func:`restore_action`).
        self.actions: dict[str, str] = dict(actions or {})
        #: A failure after the commit point (reported, never rolled back).
        self.warning = warning


# Plans ---------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    state: FileState
    checkpoint: str
    turn: int


@dataclass(frozen=True)
class InPlacePlan:
    """What an in-place replacement publishes and restores."""

    session_id: str
    base_head: str
    artifacts: Mapping[str, bytes]
    #: Every project path the transaction touches -> its restored state.
    wanted: Mapping[str, Entry | None]
    planned: Mapping[str, Planned]
    gaps: Mapping[str, KnownGap]
    digest: str


_plans: OrderedDict[str, InPlacePlan] = OrderedDict()
#: What a prepare at once read (the working tree, the recovery journal's
#: remains), for its commit (see ``Source.at_once``), by token.
_surveyed: OrderedDict[str, Survey] = OrderedDict()


@dataclass(frozen=True)
class Survey:
    """What :func:`survey_files` read and made of it."""

    hashes: dict[str, str]
    rows: tuple[FileRestore, ...]
    external: tuple[ExternalChange, ...]
    git: GitCheck
    #: The working tree's states (predicted: the recorded ones, unread).
    reads: Mapping[str, FileRead]
    recovery: RecoveryState | None
    predicted: bool = False


def remember_plan(token: StateToken, plan: InPlacePlan, survey: Survey | None = None) -> None:
    """Keep ``plan`` for the commit of ``token`` (and, for a prepare at
    once, what it read)."""
    _plans[token.text] = plan
    while len(_plans) > _PLAN_LIMIT:
        _plans.popitem(last=False)
    if survey is not None:
        _surveyed[token.text] = survey
        while len(_surveyed) > _PLAN_LIMIT:
            _surveyed.popitem(last=False)


def files_at(turn_files: Sequence[TurnFiles], kept: int, side: Side) -> tuple[dict[str, Planned], dict[str, KnownGap]]:
    """The file plan of a boundary keeping ``kept`` turns."""
    plan = restore_plan(turn_files, kept)
    first_later: dict[str, int] = {}
    for record in sorted(turn_files, key=lambda r: r.turn):
        if record.turn > kept:
            for path in record.files:
                first_later.setdefault(path, record.turn)
    planned = {path: Planned(state, "pre-turn", first_later[path]) for path, state in plan.restore.items()}
    gaps = {path: KnownGap(path, first_later[path], reason) for path, reason in plan.gaps.items()}
    if side is Side.AFTER and kept > 0:
        for record in turn_files:
            if record.turn != kept:
                continue
            for path, snapshot in record.files.items():
                if snapshot.post is not None:
                    planned[path] = Planned(snapshot.post, "post-turn", kept)
                    gaps.pop(path, None)
    return planned, gaps


def contents(planned: Mapping[str, Planned], state: SessionState, session_id: str) -> dict[str, Entry | None]:
    """Each planned path's whole state to restore (None: absent)."""
    wanted: dict[str, Entry | None] = {}
    for path, item in sorted(planned.items()):
        problem = project_path_problem(path)
        if problem is not None:
            raise LifecycleRefused(session_id, f"the captured path {path!r} cannot be restored: {problem}")
        try:
            wanted[path] = entry_of(item.state, state.file_content)
        except MissingContent:
            raise LifecycleRefused(session_id, f"the captured content of {path} (turn {item.turn}) is missing", kind="unreadable") from None
    return wanted


def restore_action(now: Entry | None, wanted: Entry | None) -> str:
    """What restoring ``wanted`` over ``now`` does, in the impact's words:
    ``delete``, ``remove directory``, ``create directory``, ``relink``,
    ``chmod 755``, ``restore`` or ``unchanged``."""
    if same_state(now, wanted):
        return "unchanged"
    if wanted is None:
        return "remove directory" if now is not None and now.kind == Entry.DIRECTORY else "delete"
    if wanted.kind == Entry.DIRECTORY:
        if now is not None and now.kind == Entry.DIRECTORY:
            return f"chmod {wanted.mode:o}"
        return "create directory"
    if wanted.kind == Entry.SYMLINK:
        return "relink"
    if now is not None and now.kind == Entry.FILE and now.data == wanted.data and wanted.mode is not None:
        return f"chmod {wanted.mode:o}"
    return "restore"


def last_recorded(turn_files: Sequence[TurnFiles], paths: Sequence[str]) -> dict[str, tuple[FileState, int]]:
    """Each path's post-turn content in the latest record naming it (paths
    whose latest record has no post-turn content are left out)."""
    wanted = set(paths)
    seen: set[str] = set()
    out: dict[str, tuple[FileState, int]] = {}
    for record in sorted(turn_files, key=lambda r: r.turn, reverse=True):
        for path, snapshot in record.files.items():
            if path in wanted and path not in seen:
                seen.add(path)
                if snapshot.post is not None:
                    out[path] = (snapshot.post, record.turn)
    return out


def recorded_matches(state: FileState, now: FileRead) -> bool:
    """Whether the working tree's ``now`` is the recorded ``state``."""
    if isinstance(now, Unreadable):
        return False
    if isinstance(state, Absent):
        return now is None
    if now is None:
        return False
    if isinstance(state, Present):
        data = now.data or b""
        return (
            now.kind == Entry.FILE
            and now.size == state.size
            and hashlib.sha256(data).hexdigest() == state.sha256
            and state.mode in (None, now.mode)
        )
    if isinstance(state, Directory):
        return now.kind == Entry.DIRECTORY and now.mode == state.mode
    return now.kind == Entry.SYMLINK and now.data == state.target.encode("utf-8", "surrogateescape")


def predicted_files(turn_files: Sequence[TurnFiles], paths: Sequence[str], content) -> dict[str, Entry | None] | None:
    """Each path's whole state as the session last recorded it after a
    turn (its latest record's post-turn state): what the working tree holds
    unless something outside the session changed it since. None when a
    path has no such record or its bytes are not in the snapshot (then the
    tree is read: also when one was recorded before modes were)."""
    recorded = last_recorded(turn_files, paths)
    if len(recorded) != len(set(paths)):
        return None
    try:
        predicted = {path: entry_of(state, content) for path, (state, _turn) in recorded.items()}
    except MissingContent:
        return None
    # A state recorded before modes were would accept any mode, and hide a
    # mode the restore must change.
    if any(entry is not None and entry.kind != Entry.SYMLINK and entry.mode is None for entry in predicted.values()):
        return None
    return predicted


async def survey_files(source: Source, plan: InPlacePlan, current: SessionState, git: GitRunner | None) -> Survey:
    """Read the working tree for an impact (in the gate's program: see
    :func:`~.two_phase.gate_reads`): the token's hashes, the restore rows,
    the external changes and the Git index check. A prepare at once
    (``--yes``: nobody sees the impact) reads nothing when every path's
    state is predicted (:func:`predicted_files`): the commit's checks prove
    the prediction, in the commit's own program, and no Git check is run."""
    if source.at_once:
        guessed = predicted_files(current.files, list(plan.wanted), current.file_content)
        if guessed is not None:
            gate = await gate_reads(source)
            hashes = {path: content_hash(state) for path, state in guessed.items()}
            rows = tuple(restore_row(path, item, guessed[path], plan.wanted[path]) for path, item in sorted(plan.planned.items()))
            unchecked = GitCheck("not-checked", detail="committed at once: the impact was shown to nobody")
            return Survey(hashes, rows, (), unchecked, guessed, gate.recovery, predicted=True)
    found: list[RecoveryState | None] = []

    async def gated(ops):
        gate = await gate_reads(source, ops)
        found.append(gate.recovery)
        return gate.results

    target = source.target
    reads = await read_project_files(target, plan.wanted, first=gated)
    refuse_unreadable(plan.session_id, reads)
    hashes = {path: content_hash(data) for path, data in reads.items()}  # type: ignore[arg-type]
    rows = tuple(restore_row(path, item, reads[path], plan.wanted[path]) for path, item in sorted(plan.planned.items()))  # type: ignore[arg-type]
    recorded = last_recorded(current.files, list(plan.wanted))
    external = tuple(
        ExternalChange(path, turn) for path, (state, turn) in sorted(recorded.items()) if not recorded_matches(state, reads[path])
    )
    check = await index_divergence(git, target, git_contents(plan.wanted))
    return Survey(hashes, rows, external, check, reads, found[0] if found else None)


def restore_row(path: str, item: Planned, now: Entry | None, wanted: Entry | None) -> FileRestore:
    """The impact's row for one planned path."""
    state = item.state
    present = isinstance(state, Present)
    action = restore_action(now, wanted)
    return FileRestore(
        path,
        "present" if present else state.__struct_config__.tag,  # type: ignore[arg-type]
        state.sha256 if present else None,  # type: ignore[union-attr]
        state.size if present else None,  # type: ignore[union-attr]
        item.checkpoint,
        item.turn,
        action != "unchanged",
        action,
        getattr(state, "mode", None),
        state.target if isinstance(state, Symlink) else None,
    )


def index_git_for(target: Target, workspace_root: Path | None) -> GitRunner | None:
    """The git the Git index check asks: the one where the target keeps
    its files (this machine or an SSH host), git in an explicit local
    ``workspace_root``, or none."""
    if workspace_root is FROM_TARGET:
        return git_runner_for(target)
    return None if workspace_root is None else LocalGit(workspace_root)


# The in-place transaction ----------------------------------------------------


def check_lease_unmoved(lease: LeaseHandle, token: StateToken) -> None:
    if lease.session_id != token.session_id:
        raise InvalidToken(f"it was prepared for session {token.session_id}, not {lease.session_id}")
    if lease.lost or lease.released:
        raise LeaseLost(lease.session_id, "this client no longer holds the lease")
    moved = []
    if lease.publication_head != token.head:
        moved.append("the committed head moved")
    # Our own rotations (renewals, the claim that opened the session after
    # an unleased prepare by the same client) move the generation without
    # moving the state; anyone else's generation does not pass.
    if lease.generation < token.lease_generation or (
        lease.generation != token.lease_generation and lease.record.client_id != token.lease_client
    ):
        moved.append(f"the lease moved from generation {token.lease_generation} to {lease.generation}")
    if moved:
        raise StaleState(lease.session_id, moved)


async def plan_for(publisher: Publisher, token: StateToken, replan) -> InPlacePlan:
    """The plan ``token`` was prepared with: remembered by this process,
    or made again from the same immutable head."""
    lease = publisher.lease
    if lease.needs_resync:
        await lease.resync()
    check_lease_unmoved(lease, token)
    plan = _plans.pop(token.text, None)
    if plan is not None:
        return plan
    assert token.head is not None
    state, snapshot = await state_at_head(lease.target, token.session_id, token.head)
    return await replan(CommittedState(snapshot, lease.record.client_id, lease.record.renewed_at, state))


async def commit_in_place(publisher: Publisher, token: StateToken, plan: InPlacePlan, *, operation: str, source: Source) -> InPlaceResult:
    """Recheck, then journal, restore the files and publish the
    replacement in ONE program (:func:`_restore_and_publish`). The recheck
    reads the working tree, with the look for a pending recovery, in a
    program before it; a prepare at once that predicted the files
    (:func:`predicted_files`) reads nothing: its checks stand for the reads,
    and when a file is not as predicted it is read and the commit made
    again with what is there, as ``--yes`` overwrites an outside change."""
    lease = publisher.lease
    sid = lease.session_id
    refuse_live(sid, source.live, operation)
    if publisher.pending is not None:
        raise PublicationPending(sid, publisher.pending.reason)
    check_lease_unmoved(lease, token)
    if set(plan.wanted) != set(token.files):
        raise InvalidToken("its files are not the ones this plan restores")
    surveyed = _surveyed.pop(token.text, None) if source.at_once else None
    if surveyed is not None:
        # The prepare has just read (or predicted) all of it, with the
        # recovery journal, and nobody was shown the impact since.
        expected, remains, guessed = surveyed.reads, surveyed.recovery or source.remains, surveyed.predicted
    else:
        found: list[RecoveryState | None] = []

        async def gated(ops):
            # The recovery journal is looked at for its remains, swept with
            # the journal, unless the caller knows them.
            gate = await gate_reads(source, ops, recovery=source.remains is None)
            found.append(gate.recovery)
            return gate.results

        expected = await read_project_files(lease.target, plan.wanted, first=gated)
        remains, guessed = found[0] if found else source.remains, False
        hashes = {p: "unreadable" if isinstance(r, Unreadable) else content_hash(r) for p, r in expected.items()}
        moved = moved_files(token.files, hashes)
        if moved:
            raise StaleState(sid, moved)
    while True:
        try:
            return await _restore_and_publish(publisher, token, plan, expected, remains or RecoveryState(None, None, None), operation)
        except _NotAsExpected as differs:
            if not guessed:
                raise StaleState(sid, differs.moved) from None
        # Predicted wrong (changed outside the session since its last turn):
        # what is there now is what the restore overwrites.
        guessed = False
        expected = await read_project_files(lease.target, plan.wanted)
        refuse_unreadable(plan.session_id, expected)


class _NotAsExpected(Exception):
    """A check found a path other than expected: nothing was written."""

    def __init__(self, moved: list[str]) -> None:
        super().__init__("; ".join(moved))
        self.moved = moved


def refuse_unreadable(session_id: str, reads: Mapping[str, FileRead]) -> None:
    blocked = {p: r.reason for p, r in reads.items() if isinstance(r, Unreadable)}
    if blocked:
        listed = "; ".join(f"{p}: {why}" for p, why in sorted(blocked.items()))
        raise LifecycleRefused(session_id, f"captured files cannot be restored ({listed})", kind="unreadable")


async def _restore_and_publish(
    publisher: Publisher, token: StateToken, plan: InPlacePlan, expected: Mapping[str, FileRead], remains: RecoveryState, operation: str
) -> InPlaceResult:
    """One program: a check that each path holds ``expected`` (a
    ``PutEntry`` of that same state, which writes nothing), then -- when
    anything changes -- the lease proof, the journal, the project-file
    writes (each conditional on its expected state), the replacement
    publication and its barrier (one flush for the files and the
    publication), the head commit, and the journal's removal riding after
    it. A check that fails stops it before anything is written
    (:class:`_NotAsExpected`); a failure after the journal rolls the files
    back."""
    lease = publisher.lease
    sid = lease.session_id
    states: dict[str, Entry | None] = {}
    for path, now in expected.items():
        if isinstance(now, Unreadable):
            raise _NotAsExpected([f"{path} cannot be read ({now.reason})"])
        states[path] = now
    changes = [(p, states[p], plan.wanted[p]) for p in sorted(plan.wanted) if not same_state(states[p], plan.wanted[p])]
    checks: list[Operation] = [PutEntry(p, states[p], states[p]) for p in sorted(plan.wanted)]
    if not changes and await _publishes_nothing(publisher, plan):
        if checks:
            result = await lease.target.run(ControlProgram(checks))
            _judge_checks(checks, result, len(checks))
        return InPlaceResult(plan.session_id, False, lease.publication_head, LazyConversation(plan.artifacts), ())
    for _ in range(GUARD_ATTEMPTS):
        if lease.needs_resync:
            await lease.resync()
        if lease.lost or lease.released:
            raise LeaseLost(sid, "this client no longer holds the lease")
        if lease.publication_head != token.head:
            raise StaleState(sid, ["the committed head moved"])
        journal = new_journal(sid, operation, token.head, plan.digest, changes) if changes else None
        proof = lease_proof(lease) if journal is not None else []
        journaled = journal_ops(lease.paths, journal) if journal is not None else []
        writes = [PutEntry(path, before, after, deferred=True) for path, before, after in ordered_steps(changes)]
        lead = [*checks, *proof, *journaled, *writes]
        rider, removed = None, []
        if journal is not None:
            sweep = await sweep_ops(lease.target, lease.paths, remains)
            # Never stopping the program: other riders (collection's) follow it.
            removal = removal_ops(lease.paths, journal.marker.recovery_id, sweep, unsure=True)
            rider = lease.ride(removal, delivered=removed.append)
        try:
            published = await publisher.publish(plan.artifacts, replace=True, force=bool(changes), lead=lead)
        except LeadStopped as stopped:
            result = stopped.result
            _judge_checks(checks, result, len(checks))
            at = result.stopped_at
            assert at is not None
            if at < len(checks) + len(proof):
                await lease.resync()  # a renewal moved the generation: follow it and try again
                continue
            failed = result[at]
            why = failed.reason or failed.status.value
            if at < len(checks) + len(proof) + len(journaled):
                raise SessionRefusal(sid, f"the recovery record could not be written ({why})") from None
            error = SessionRefusal(sid, f"project files could not be restored ({lead[at].path}: {why})")
            return await _after_failure(publisher, token, plan, journal, changes, error, remains, operation)
        except (StoreError, TargetError) as error:
            return await _after_failure(publisher, token, plan, journal, changes, error, remains, operation)
        finally:
            if rider is not None:
                lease.withdraw(rider)
        # A removal the program did not reach (it failed after the commit
        # point) is made in a program of its own.
        ran = removed[0] if removed and all(r.status is not Status.SKIPPED for r in removed[0]) else None
        return await _finish(lease, plan, journal, changes, published.head, published.committed, remains, ran)
    raise LeaseLost(sid, "the lease kept moving while the files were restored")


def _judge_checks(checks: Sequence[Operation], result, count: int) -> None:
    """Raise :class:`_NotAsExpected` when one of the first ``count``
    operations (the checks) stopped ``result``."""
    at = result.stopped_at
    if at is None or at >= count:
        return
    path = checks[at].path
    found = result[at]
    if found.status is Status.MISMATCH:
        raise _NotAsExpected([f"{path} changed since it was read"])
    raise _NotAsExpected([f"{path} cannot be checked ({found.reason or found.status.value})"])


async def _publishes_nothing(publisher: Publisher, plan: InPlacePlan) -> bool:
    """The replacement is the committed snapshot itself."""
    manifest = await publisher.committed_manifest()
    return manifest is not None and snapshot_digest({logical: e.sha256 for logical, e in manifest.entries.items()}) == plan.digest


async def _after_failure(
    publisher: Publisher, token: StateToken, plan: InPlacePlan, journal, changes, error: BaseException, remains: RecoveryState,
    operation: str,
) -> InPlaceResult:
    """The program failed (or its effect is unknown): finish what committed
    anyway, else put every file back. A host that cannot be reached to
    tell is said to be exactly that (:class:`OutcomeUnknown`): nothing is
    rolled back over a head that may have committed."""
    lease = publisher.lease
    if publisher.pending is not None:
        publisher.abandon()
    marker = journal.marker.recovery_id if journal is not None else None
    state = f"the {operation} may or may not have been applied"
    if isinstance(error, PublicationUnknown):  # the publication has just found the host gone
        raise OutcomeUnknown(
            lease.session_id, operation, state, error.dropped, error.unreachable, follow_up="retry-recovery", marker=marker
        ) from error
    try:
        committed = await _committed_anyway(lease, token, plan)
    except TargetUnavailable as unreachable:
        raise OutcomeUnknown(lease.session_id, operation, state, error, unreachable, follow_up="retry-recovery", marker=marker) from error
    if committed:
        return await _finish(lease, plan, journal, changes, lease.publication_head, True, remains, None)
    if journal is None and not isinstance(error, (PublicationFailed, TargetError)):
        raise error  # a lost lease, a stale head: their own words are what happened
    left = await _roll_back(lease, journal, changes, error, operation)
    raise RolledBack(lease.session_id, operation, error, journaled=left is not None, left=left or ()) from error


def _cause_kind(cause: BaseException) -> str:
    """``unavailable`` when the target failed under the transaction (a
    publication's failure wraps it), else the cause's own kind."""
    if target_error_in(cause) is not None:
        return "unavailable"
    return getattr(cause, "kind", "conflict")


class RolledBack(LifecycleError, SessionRefusal):
    """The transaction failed before its commit point and undid itself: the
    session is as it was, every project file it had written holds its old
    state again (``journaled`` False: its program stopped before it wrote
    any), except ``left``: files changed outside the session meanwhile,
    which are never overwritten. The same transaction can be prepared and
    committed again. ``kind`` is the cause's (``unavailable`` for a
    dropped connection)."""

    def __init__(
        self, session_id: str, operation: str, cause: BaseException, *, journaled: bool = True, left: Sequence[str] = ()
    ) -> None:
        why = cause_in_words(session_id, cause)
        again = f"the {operation} can be run again"
        if not journaled:
            said = f"the {operation} did not happen: {why}, before it changed any project file; the session and its files are as they were, so {again}"
        elif left:
            theirs = ", ".join(left)
            said = (
                f"the {operation} did not happen: {why}; every project file it had written was put back except {theirs}, "
                f"changed outside the session meanwhile and left as {'they are' if len(left) > 1 else 'it is'}; "
                f"the session is as it was, so {again}"
            )
        else:
            said = (
                f"the {operation} did not happen: {why}; every project file it had written was put back, so the session "
                f"and its files are as they were and {again}"
            )
        SessionRefusal.__init__(self, session_id, said)
        self.kind = _cause_kind(cause)
        self.operation = operation
        self.left = tuple(left)


async def _committed_anyway(lease: LeaseHandle, token: StateToken, plan: InPlacePlan) -> bool:
    """After a failure whose effect is unknown: did the replacement commit?
    A host that cannot be reached to tell raises its TargetUnavailable."""
    try:
        observed = await read_lease_head(lease.target, lease.session_id)
        head = observed.publication_head
        if head is None or head == token.head:
            return False
        manifest = await load_manifest(lease.target, lease.paths, head)
    except TargetUnavailable:
        raise
    except (StoreError, TargetError, RecordError):
        return False
    if snapshot_digest({logical: e.sha256 for logical, e in manifest.entries.items()}) != plan.digest:
        return False
    try:
        await lease.resync()
    except TargetUnavailable:
        raise
    except (StoreError, TargetError):
        pass
    return lease.publication_head == head


class _NotJournaled(Exception):
    """The failed program never wrote its journal, so it wrote no project
    file either: the journal precedes the writes."""


async def _roll_back(lease: LeaseHandle, journal, changes, error: BaseException, operation: str) -> tuple[str, ...] | None:
    """Put back every file the failed program wrote; keep the journal
    unless that worked. Returns the files left as they are (changed outside
    the session meanwhile), or None when the program never wrote its
    journal, hence no file: the rollback's first program reads the journal
    beside the files, and writes nothing when it is not there. A file
    changed outside the session meanwhile is never overwritten (the rule of
    :func:`~.recovery.settle_files`). With the host out of reach, the
    journal is one that may be there, never one that is."""
    if journal is None:
        return None
    rid = journal.marker.recovery_id

    def unreachable(state: str, cause: TargetUnavailable) -> OutcomeUnknown:
        return OutcomeUnknown(lease.session_id, operation, state, error, cause, follow_up="retry-recovery", marker=rid)

    def required(failed: Mapping[str, str], unsure: str | None = None) -> RecoveryRequired:
        return RecoveryRequired(lease.session_id, rid, failed, cause_in_words(lease.session_id, error), unsure=unsure)

    held: list[bool] = []

    async def journaled(ops: Sequence[Operation]) -> Sequence[OpResult]:
        result = await lease.target.run(ControlProgram([marker_read(lease.paths, rid), *ops]))
        if not marker_held(result[0]):
            raise _NotJournaled
        held.append(True)
        return result.results[1:]

    put_back = f"the {operation} was not applied and every project file it had written was put back"
    try:
        outcome = await settle_files(lease, changes, back=True, first=journaled)
    except _NotJournaled:
        return None
    except TargetUnavailable as cause:
        state = f"the {operation} was not applied, but the project files it may have written could not be put back"
        raise unreachable(state, cause) from error
    except (StoreError, TargetError) as rollback_error:
        failed = {path: f"not rolled back ({rollback_error})" for path, _before, _after in changes}
        raise required(failed, unsure=None if held else str(rollback_error)) from error
    if outcome.failed:
        raise required(outcome.failed) from error
    try:
        result, proof = await run_guarded(lease, removal_ops(lease.paths, rid))
    except TargetUnavailable as cause:
        raise unreachable(put_back, cause) from error
    except (StoreError, TargetError) as cleanup_error:
        raise required({".recovery": str(cleanup_error)}, unsure=str(cleanup_error)) from error
    marker = result[proof]
    if not marker_removed(marker):
        raise required({".recovery": marker.reason or marker.status.value}) from error
    return outcome.left


async def _finish(
    lease: LeaseHandle, plan: InPlacePlan, journal, changes, head, committed: bool, remains: RecoveryState,
    removed: tuple[OpResult, ...] | None,
) -> InPlaceResult:
    """The result, once the journal is gone: ``removed`` holds the results
    of its removal when that rode the commit (None: removed here, in a
    program of its own)."""
    warning = None
    if journal is not None:
        try:
            if removed is None:
                # The commit's own removal may have run before it failed.
                sweep = await sweep_ops(lease.target, lease.paths, remains)
                result, proof = await run_guarded(lease, removal_ops(lease.paths, journal.marker.recovery_id, sweep, unsure=True))
                removed = result.results[proof:]
            marker = removed[0]  # removed first: the rest is optional
            if not marker_removed(marker):
                warning = f"the recovery record was not removed ({marker.reason or marker.status.value}); retry the recovery"
        except TargetUnavailable as error:
            # Its removal rode the commit, whose answer may be what was lost.
            warning = f"the recovery record may be left on the host ({error}); retry the recovery when the host can be reached"
        except (StoreError, TargetError) as error:
            warning = f"the recovery record was not removed ({error}); retry the recovery"
    written = tuple(path for path, _before, _after in changes)
    actions = {path: restore_action(before, after) for path, before, after in changes}
    return InPlaceResult(plan.session_id, committed, head, LazyConversation(plan.artifacts), written, warning, actions)
