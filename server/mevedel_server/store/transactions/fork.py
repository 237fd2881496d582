"""Conversation Fork: a new session whose transcript ends at a settled
response of the source, and the variants of a fork point.

The child (:func:`prepare_fork`, :func:`commit_fork`) gets its own session
ID and displays it (naming pending, no input). Its snapshot is the source's
committed snapshot cut after the chosen turn (:mod:`.snapshot_cut`), with
every kept segment header naming the child; its sidecar records the fork
origin -- source ID, the cumulative fork turn (the child's transcript holds
every inherited turn, so the turn number already counts them), the stable
fork-point ID (the turn's identity) and the fork type -- and copies the
settings into its own values, the attached artifact ids (not their
bytes) and the source's worktree record (the child keeps the source's
working directory: a Conversation Fork of a Worktree Fork works in its
checkout). The sidecar has no tasks, queues, agents or requests, so they start
empty by construction; the reconciliation reminder does not carry over.
``local/`` is copied into the child except ``local/plans/``: only a plan
accepted at the fork point survives, after its recorded hash is re-verified,
and the sidecar keeps no accepted-plan record yet, so no plan is copied and
the impact says so. The source is only read.

Creating a child (:func:`publish_child`, shared with Save As and Worktree
Fork): allocate an unused ID, create its directory exclusively, acquire the
child's lease *before* any of its bytes are written, copy its ``local/``
files behind that lease's proof, then publish one complete replacement
snapshot -- the lease rotation naming it is the child's commit point. A
marker (``.unpublished-child``, :data:`~.layout.UNPUBLISHED_CHILD`) is
created with the directory, in its program, and removed after that publication: a
listing never shows a child that has it and no head, and removes it once
its lease is free (:mod:`.listing`, :mod:`.cleanup`). The
child's files that hold the same bytes as a file the source's committed
manifest names are hard links to it (checked byte for byte by the target),
so a child costs the bytes that differ plus one name per artifact; the child
owns those names, so removing or collecting the source never reaches it. Until
then no listing shows the child; a failure before it removes what was
created, and a crash leaves an uncommitted directory whose claim expires and
which the next listing or cleanup then removes. After it, failures are
reported, never rolled back.

The fork-point group of a response (its variants) is a workspace-wide
reading: :mod:`..workspace_wide.fork_variants`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ...targets import (
    Barrier,
    ControlProgram,
    Entry,
    ListDir,
    Operation,
    PutEntry,
    ReadEntry,
    Remove,
    Stat,
    Status,
    Target,
    TargetError,
    raise_for_result,
)
from ..authority.lease import (
    DEFAULT_LEASE_SECONDS,
    ClientIdentity,
    LeaseHandle,
    acquire_lease,
)
from ..authority.publication import Donors, Publisher, donors_of
from ..authority.workspace import (
    allocate_session_id,
    materialize_session,
)
from ..content.sidecar import (
    ForkOrigin,
    ForkType,
    NamingState,
    PromptEntry,
    WorktreeOrigin,
    agent_history_note,
)
from ..errors import (
    OutcomeUnknown,
    PublicationUnknown,
    SessionOccupied,
    SessionRefusal,
    StoreError,
)
from ..layout import SessionPaths
from .lifecycle_token import (
    InvalidToken,
    LifecycleRefused,
    StaleState,
    StateToken,
    content_hash,
    moved_files,
)
from .recovery import run_guarded
from .snapshot_cut import (
    Boundary,
    CommittedSnapshotResult,
    CommittedState,
    LazyConversation,
    cut_snapshot,
    load_committed_state,
    locate,
)
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

LOCAL_DIR = "local"
PLANS_DIR = "plans"
NO_PLAN_RECORD = "the source records no accepted plan, so no local/plans/ file was copied"


# local/ --------------------------------------------------------------------------


async def read_local(target: Target, paths: SessionPaths, *, skip_plans: bool) -> dict[str, Entry]:
    """Every file and directory under the session's ``local/`` (paths
    relative to it, each directory before what it holds), as its whole
    state: a file's bytes and permission bits, a directory's bits, so the
    copy is what the user left there (an empty directory included),
    optionally without ``local/plans/``. A symlink or special file refuses."""
    found: dict[str, Entry] = {}
    pending = [""]
    base = paths.inside(LOCAL_DIR)
    while pending:
        batch, pending = pending[:64], pending[64:]
        listings = await target.run(ControlProgram([ListDir(f"{base}/{d}" if d else base, optional=True) for d in batch]))
        entries: list[str] = []
        for directory, listed in zip(batch, listings):
            if listed.status is Status.ABSENT:
                continue
            if not listed.ok:
                raise LifecycleRefused(paths.session_id, f"local/{directory} cannot be listed ({listed.reason})", kind="unreadable")
            for name in listed.value:
                rel = f"{directory}/{name}" if directory else name
                if skip_plans and rel == PLANS_DIR:
                    continue
                entries.append(rel)
        if not entries:
            continue
        stats = await target.run(ControlProgram([Stat(f"{base}/{rel}", optional=True) for rel in entries]))
        kept = []
        for rel, stat in zip(entries, stats):
            if stat.status is Status.ABSENT:
                continue
            if not stat.ok or stat.value.kind == "other":
                why = stat.reason if not stat.ok else "not a regular file or directory"
                raise LifecycleRefused(paths.session_id, f"local/{rel} cannot be copied ({why})", kind="unreadable")
            kept.append(rel)
            if stat.value.kind == "directory":
                pending.append(rel)
        reads = await target.run(ControlProgram([ReadEntry(f"{base}/{rel}", optional=True) for rel in kept]))
        for rel, read in zip(kept, reads):
            if read.ok and read.value.kind != Entry.SYMLINK:
                found[rel] = read.value
            elif read.ok:  # swapped for a link since the stat
                raise LifecycleRefused(paths.session_id, f"local/{rel} cannot be copied (a symbolic link)", kind="unreadable")
            elif read.status is not Status.ABSENT:
                raise LifecycleRefused(paths.session_id, f"local/{rel} cannot be read ({read.reason})", kind="unreadable")
    return dict(sorted(found.items()))


def local_file_names(local: Mapping[str, Entry]) -> tuple[str, ...]:
    """The files of a :func:`read_local` copy (what an impact lists)."""
    return tuple(rel for rel, entry in local.items() if entry.kind == Entry.FILE)


def local_hashes(local: Mapping[str, Entry]) -> dict[str, str]:
    return {f"{LOCAL_DIR}/{rel}": content_hash(entry.data or b"") for rel, entry in local.items() if entry.kind == Entry.FILE}


def _local_ops(paths: SessionPaths, local: Mapping[str, Entry]) -> list[Operation]:
    # The copies share one flush at the end: the child is not committed (so
    # not readable) until its publication, a later program. Directories are
    # made first (parents before children) with the default mode and given
    # their own bits last, deepest first, so a directory the user made
    # read-only still receives its files.
    def inside(rel: str) -> str:
        return paths.inside(f"{LOCAL_DIR}/{rel}")

    directories = [rel for rel, entry in local.items() if entry.kind == Entry.DIRECTORY]
    ops: list[Operation] = [PutEntry(inside(rel), None, Entry.directory(None), deferred=True) for rel in directories]
    ops += [PutEntry(inside(rel), None, entry, deferred=True) for rel, entry in local.items() if entry.kind == Entry.FILE]
    ops += [
        PutEntry(inside(rel), Entry.directory(None), Entry.directory(local[rel].mode), deferred=True) for rel in reversed(directories)
    ]
    ops.append(Barrier())
    return ops


# Publishing a child ------------------------------------------------------------


class ChildSession(CommittedSnapshotResult):
    """A child session that committed its first publication."""

    def __init__(
        self,
        session_id: str,
        head: str | None,
        lazy: LazyConversation,
        lease: LeaseHandle | None,
        publisher: Publisher | None,
        warning: str | None = None,
    ) -> None:
        super().__init__(lazy)
        self.session_id = session_id
        self.head = head
        #: The child's lease while the caller keeps it (None once released).
        self.lease = lease
        self.publisher = publisher
        #: A failure after the commit point (reported, never rolled back).
        self.warning = warning


async def remove_session_tree(target: Target, paths: SessionPaths) -> None:
    """Best-effort removal of a child that never committed (what a target
    out of reach keeps, the next listing removes once its lease is free)."""
    removals: list[str] = []
    pending = [paths.root]
    try:
        while pending:
            directory = pending.pop()
            listed = (await target.run(ControlProgram([ListDir(directory, optional=True)])))[0]
            if not listed.ok:
                continue
            stats = await target.run(ControlProgram([Stat(f"{directory}/{n}", optional=True) for n in listed.value]))
            for name, stat in zip(listed.value, stats):
                path = f"{directory}/{name}"
                if stat.ok and stat.value.kind == "directory":
                    pending.append(path)
                    removals.append(path)
                else:
                    removals.append(path)
            removals.append(directory)
        # Deepest first: a directory goes after its contents.
        ordered = sorted(set(removals), key=lambda p: (-p.count("/"), p))
        await target.run(ControlProgram([Remove(p, optional=True) for p in ordered]))
    except TargetError:
        pass


async def publish_child(
    target: Target,
    client: ClientIdentity,
    build: Callable[[str, int], Mapping[str, bytes]],
    *,
    at: int = 0,
    local_files: Mapping[str, Entry] = {},
    live_ids: Sequence[str] = (),
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    keep_lease: bool = False,
    donors: Donors = {},
    source: tuple[str, str] | None = None,
    names_holder: bool = True,
) -> ChildSession:
    """Create a child session from ``build(child_id, created_at)``'s
    snapshot (see the module); ``created_at`` is the later of ``at`` and the
    target clock the child's claim read. ``keep_lease`` hands the child's
    lease to the caller (to open the child as its live session) instead of
    releasing it. The child's files whose bytes ``donors`` (the source's
    published files) hold are hard links to them, so a child costs what
    differs from its source plus one name per artifact. ``source``: the
    session it is made from and the operation (``fork``, ...), to name in
    the error of a publication whose host could not tell how it ended."""
    child_id = await allocate_session_id(target, live_ids=live_ids)
    paths = SessionPaths(child_id)
    lease: LeaseHandle | None = None
    try:
        # Until the one publication, the directory says what it is: a
        # listing never shows it and, once its lease is free, removes it.
        await materialize_session(target, child_id, child=True)
    except SessionOccupied:
        raise  # somebody else's directory: never remove it
    except (StoreError, TargetError):
        await remove_session_tree(target, paths)
        raise
    try:
        lease = await acquire_lease(target, child_id, client, duration_seconds=lease_seconds, names_holder=names_holder)
        artifacts = dict(build(child_id, max(at, lease.now)))
        if local_files:
            ops = _local_ops(paths, local_files)
            result, proof = await run_guarded(lease, ops)
            if result.stopped_at is not None:
                failed = result[result.stopped_at]
                where = ops[result.stopped_at - proof].path
                raise SessionRefusal(child_id, f"copying {where[len(paths.root) + 1:]} failed ({failed.reason or failed.status.value})")
        publisher = Publisher(lease)
        outcome = await publisher.publish(artifacts, replace=True, donors=donors)
    except PublicationUnknown as unknown:
        # Its head may have committed: the child is neither removed nor said
        # to be missing (a child that did not commit, the next listing
        # removes once its lease is free).
        sid, operation = source or (child_id, "creation")
        state = f"the {operation} may or may not have made the new session {child_id}"
        raise OutcomeUnknown(sid, operation, state, unknown.dropped, unknown.unreachable, follow_up="list") from unknown
    except (StoreError, TargetError):
        if not _committed(lease):
            await remove_session_tree(target, paths)
        raise
    warning = None
    try:  # with a committed head the marker means nothing: a failure only warns
        unmark = Remove(paths.unpublished_child, optional=True)
        done = (await target.run(ControlProgram([unmark])))[0]
        if not done.ok and done.status is not Status.ABSENT:
            raise_for_result(unmark, done)
    except TargetError as error:
        warning = f"the child's creation marker was not removed ({error}); with its head committed it means nothing"
    if not keep_lease:
        try:
            await lease.release()
        except (StoreError, TargetError) as error:
            warning = (warning + "; " if warning else "") + f"the child's lease was not released ({error}); it expires on its own"
    if not keep_lease:
        return ChildSession(child_id, outcome.head, LazyConversation(artifacts), None, None, warning)
    return ChildSession(child_id, outcome.head, LazyConversation(artifacts), lease, publisher, warning)


def _committed(lease: LeaseHandle | None) -> bool:
    return lease is not None and lease.publication_head is not None


# Fork ----------------------------------------------------------------------


@dataclass(frozen=True)
class ForkImpact:
    session_id: str
    fork_type: ForkType
    #: The response the child's transcript ends at.
    response: TurnLabel
    fork_point_id: str
    #: Turns the child inherits (the cumulative fork turn).
    turns: int
    settings: Mapping[str, str | int | bool]
    attached_artifacts: tuple[str, ...]
    #: ``local/`` files the child gets (relative to ``local/``).
    local_files: tuple[str, ...]
    #: What happens to ``local/plans/``.
    plans_note: str
    token: StateToken
    #: What happens to the agent's own history (None: there is none).
    agent_history: str | None = None


def check_fork_point(state: CommittedState, turn: int) -> PromptEntry:
    sid = state.session_id
    sidecar = state.sidecar
    total = sidecar.total_turn_count
    if type(turn) is not int or not 1 <= turn <= total:
        known = f"its settled responses are turns 1-{total}" if total else "it has no settled response"
        raise LifecycleRefused(sid, f"there is no settled response at turn {turn!r} ({known})", kind="invalid-params")
    origin = sidecar.fork
    if origin is not None and turn <= origin.turn:
        raise LifecycleRefused(
            sid,
            f"turn {turn} was inherited from session {origin.session_id}; fork it from that session instead",
        )
    return state.state.prompts[turn - 1]


def fork_sidecar_changes(
    state: CommittedState, child_id: str, entry: PromptEntry, fork_type: ForkType, at: int, worktree: WorktreeOrigin | None
) -> dict[str, object]:
    sidecar = state.sidecar
    return dict(
        session_id=child_id,
        display_name=None,
        naming_state=NamingState.PENDING,
        naming_input=None,
        created_at=at,
        updated_at=at,
        fork=ForkOrigin(fork_type=fork_type, session_id=state.session_id, turn=entry.turn, fork_point_id=entry.turn_id),
        worktree=worktree,
        settings=dict(sidecar.settings),
        attached_artifacts=list(sidecar.attached_artifacts),
        # The item names its own conversation, never a copy of it.
        dedicated_artifact=None,
        reconciliation_pending=False,
        # Conversation and Worktree forks discard retained-agent identities (spec).
        agents=[],
    )


@dataclass(frozen=True)
class ChildOptions:
    """How a child transaction's commit opens the child: as ``client``,
    avoiding the IDs in ``live_ids``, under a lease of ``lease_seconds``,
    kept (``keep_lease``) for the caller that opens it writable, naming
    this process as its holder or not (``names_holder``, see
    :class:`~..authority.lease.LeaseHandle`)."""

    client: ClientIdentity
    live_ids: Sequence[str] = ()
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    keep_lease: bool = False
    names_holder: bool = True

    @property
    def opening(self) -> dict:
        """:func:`publish_child`'s keywords for it."""
        return {"live_ids": self.live_ids, "lease_seconds": self.lease_seconds, "keep_lease": self.keep_lease,
                "names_holder": self.names_holder}


@dataclass(frozen=True)
class Fork:
    """A Conversation Fork after the response of ``turn``, as a plan of the
    two-phase skeleton; ``child``: how its commit opens the child."""

    op: ClassVar[str] = "fork"
    turn: int
    at: int | None = None
    child: ChildOptions | None = None

    async def prepare(self, source: Source) -> ForkImpact:
        state = await committed_state(source)
        entry = check_fork_point(state, self.turn)
        local = await read_local(source.target, state.snapshot.paths, skip_plans=True)
        when = plan_time(state, self.at)
        subject = {"turn": self.turn, "fork_point_id": entry.turn_id, "fork_type": ForkType.CONVERSATION.value}
        token = issue_token(self.op, state, when, subject, local_hashes(local))
        sidecar = state.sidecar
        return ForkImpact(
            source.session_id,
            ForkType.CONVERSATION,
            TurnLabel.of(entry),
            entry.turn_id,
            entry.turn,
            dict(sidecar.settings),
            tuple(sidecar.attached_artifacts),
            local_file_names(local),
            NO_PLAN_RECORD,
            token,
            agent_history_note(sidecar.engine, copy=True),
        )

    @classmethod
    def from_token(cls, token: StateToken, *, child: ChildOptions) -> Fork:
        if token.subject.get("fork_type") != ForkType.CONVERSATION.value:
            raise InvalidToken("it is not a conversation fork")
        return cls(token.subject.get("turn"), token.at, child)  # type: ignore[arg-type]

    async def commit(self, source: Source, token: StateToken) -> ForkResult:
        assert self.child is not None
        target = source.target
        state, entry, local = await recheck_source(target, token)
        # The child keeps the source's working directory (spec): a Conversation
        # Fork of a Worktree Fork works in that same checkout, so it keeps the
        # worktree record that names it.
        worktree = state.sidecar.worktree
        build = child_snapshot(
            state, entry, lambda child_id, at: fork_sidecar_changes(state, child_id, entry, ForkType.CONVERSATION, at, worktree)
        )
        child = await publish_child(
            target, self.child.client, build, at=token.at, local_files=local, donors=donors_of(state.snapshot),
            source=(state.session_id, "fork"), **self.child.opening,
        )
        return ForkResult(child, state.session_id, entry.turn_id, entry.turn, NO_PLAN_RECORD)


async def prepare_fork(target: Target, session_id: str, turn: int, *, at: int | None = None) -> ForkImpact:
    """The impact of a Conversation Fork after the response of ``turn``."""
    return await prepare(Fork(turn, at), Source(target, session_id))


async def recheck_lease(target: Target, token: StateToken) -> CommittedState:
    """The source's committed state, provided its head and lease are the
    ones the prepare saw (the same holder renewing is not a move): one
    observation of the lease, the one the state is read under."""
    state = await load_committed_state(target, token.session_id)
    moved = []
    if state.head != token.head:
        moved.append("the source's committed head moved")
    generation = state.snapshot.lease_generation
    if generation < token.lease_generation or (generation != token.lease_generation and state.lease_client != token.lease_client):
        moved.append(f"the source's lease moved from generation {token.lease_generation} to {generation}")
    if moved:
        raise StaleState(token.session_id, moved)
    return state


async def recheck_source(target: Target, token: StateToken) -> tuple[CommittedState, PromptEntry, dict[str, Entry]]:
    """The source exactly as the fork's prepare saw it, or StaleState."""
    state = await recheck_lease(target, token)
    turn = token.subject.get("turn")
    entry = check_fork_point(state, turn)  # type: ignore[arg-type]
    if entry.turn_id != token.subject.get("fork_point_id"):
        raise StaleState(token.session_id, [f"turn {turn} is no longer the response that was chosen"])
    local = await read_local(target, state.snapshot.paths, skip_plans=True)
    hashes = local_hashes(local)
    moved = moved_files(token.files, hashes) + [f"{path} was created" for path in hashes if path not in token.files]
    if moved:
        raise StaleState(token.session_id, moved)
    return state, entry, local


def child_snapshot(
    state: CommittedState,
    entry: PromptEntry,
    changes: Callable[[str, int], dict[str, object]],
    retarget: Callable[[str], str] | None = None,
) -> Callable[[str], Mapping[str, bytes]]:
    """The builder of a fork child's snapshot (given its new ID)."""
    cut = locate(state.state, Boundary.after(entry.turn))

    def build(child_id: str, at: int) -> Mapping[str, bytes]:
        return cut_snapshot(state.state, cut, changes(child_id, at), retarget=retarget)

    return build


@dataclass
class ForkResult:
    child: ChildSession
    source_id: str
    fork_point_id: str
    turns: int
    plans_note: str


async def commit_fork(
    target: Target,
    token: StateToken | str,
    client: ClientIdentity,
    *,
    live_ids: Sequence[str] = (),
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    keep_lease: bool = False,
) -> ForkResult:
    """Recheck the source and create the Conversation Fork child."""
    parsed = parse_token(token, (Fork.op,))
    child = ChildOptions(client, live_ids, lease_seconds, keep_lease)
    return await commit(Fork, Source(target, parsed.session_id), parsed, child=child)
