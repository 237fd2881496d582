"""The durable recovery record of a transaction that restores project files.

A Rewind or Redo writes project files before its commit point (the head
publication). So that no interruption -- a failed write, a lost lease, a
process killed mid-restore -- can leave the working tree half restored
without a trace, the transaction first journals what it is about to do,
inside the session directory and through the target::

    <session>/.recovery/
      <32 hex>/repair.data          every old and new file content, concatenated
      recovery-<32 hex>.json        the marker, written after the bytes

The marker (:class:`RecoveryMarker`) names the session's head before the
transaction (``base_head``), a digest of the replacement snapshot it is
publishing (``replacement``), and for each file its content before and after
(SHA-256, or absent) with the span of those bytes in ``repair.data``. A
successful transaction, or one whose rollback restored every file, removes
the marker first and then its bytes, so no recovery tree remains. A rollback
that could not restore every file keeps it, and so does a crash at any
point.

While a marker exists the session is *in recovery*: every lifecycle
transaction refuses (:class:`RecoveryPending`), and a caller admitting any
other mutation should ask :func:`find_recovery` first. Releasing or losing a
lease never removes a marker. Two explicit actions end it, both under the
session's lease:

- :func:`retry_recovery` decides from the committed head which side won: the
  base head still committed means the transaction never committed, so every
  file goes back to its old content; a head whose snapshot digest is the
  marker's replacement means it did, so every file gets its new content.
  Either way a file changed outside the session since the transaction was
  interrupted is left as it is and named (:func:`settle_files`, the rule a
  failed transaction's own rollback follows too). Any other head (the
  session moved on) refuses: only abandonment is left.
- :func:`abandon_recovery` first records the approved deletion in the marker
  (``abandoning``), then removes the bytes, then the marker. If it stops
  partway the marker still blocks, and abandoning again finishes.

Directories under ``.recovery/`` without a marker are the remains of a
cleanup that stopped after the marker went; they block nothing and are
removed by the next retry, abandonment or successful journal cleanup.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated

import msgspec

from ...lazy_decoder import LazyDecoder
from ...targets import (
    ControlProgram,
    CreateExclusive,
    Entry,
    ListDir,
    MakeDirs,
    Operation,
    OpResult,
    Read,
    Remove,
    Replace,
    Status,
    Target,
    Verify,
    raise_for_result,
)
from ..authority.lease import LeaseHandle
from ..authority.publication import load_manifest
from ..authority.records import HEAD_PATTERN, RecordError
from ..authority.workspace import check_session_id
from ..errors import LeaseLost, SessionRefusal
from ..layout import SessionPaths
from .lifecycle_token import LifecycleError, LifecycleRefused

if TYPE_CHECKING:
    from .project_files import ConvergeOutcome, FirstReads

# The project-file writes (and the git runner behind them) are imported by
# the functions that repair: listing a pending recovery needs neither.

RECOVERY_DIR = ".recovery"
RECOVERY_FORMAT_VERSION = 1
_MARKER_NAME = re.compile(r"^recovery-([0-9a-f]{32})\.json\Z")
_ID_NAME = re.compile(r"^[0-9a-f]{32}\Z")
DATA_NAME = "repair.data"
#: Attempts at a guarded program when a lease renewal moved the generation.
GUARD_ATTEMPTS = 4

Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]


class BlobSpan(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    offset: Annotated[int, msgspec.Meta(ge=0)]
    size: Annotated[int, msgspec.Meta(ge=0)]


Kind = Annotated[str, msgspec.Meta(pattern=r"^(file|directory|symlink)\Z")]
Mode = Annotated[int, msgspec.Meta(ge=0, le=0o7777)]


class JournalFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True, omit_defaults=True):
    path: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    #: SHA-256 of the bytes before the transaction (a file's content, a
    #: link's target); None: absent, or a directory (``before_kind``).
    before: Sha256 | None
    #: SHA-256 of the bytes the transaction gives it; None: removed, or a
    #: directory.
    after: Sha256 | None
    #: The kinds and permission bits on each side (a marker written before
    #: they were recorded has none: regular files of unknown mode).
    before_kind: Kind = "file"
    before_mode: Mode | None = None
    after_kind: Kind = "file"
    after_mode: Mode | None = None


class RecoveryMarker(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    format_version: int = RECOVERY_FORMAT_VERSION
    recovery_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}\Z")]
    session_id: str
    #: ``rewind`` or ``redo``.
    operation: Annotated[str, msgspec.Meta(pattern=r"^[a-z-]{1,32}\Z")]
    base_head: Annotated[str, msgspec.Meta(pattern=HEAD_PATTERN)] | None
    #: :func:`snapshot_digest` of the replacement being published.
    replacement: Sha256
    files: list[JournalFile]
    blobs: dict[Sha256, BlobSpan]
    #: Abandonment was approved: the bytes may already be gone.
    abandoning: bool = False


_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = LazyDecoder(msgspec.json.Decoder, RecoveryMarker)


class RecoveryPending(LifecycleError, SessionRefusal):
    """The session has a recovery marker: retry or abandon it first."""

    kind = "recovery-pending"

    def __init__(self, session_id: str, recovery_id: str, detail: str | None = None) -> None:
        why = f" ({detail})" if detail else ""
        SessionRefusal.__init__(
            self,
            session_id,
            f"is in recovery {recovery_id}{why}: an interrupted transaction left project files "
            "to repair; retry or abandon the recovery before changing the session",
            continues=True,
        )
        self.recovery_id = recovery_id


class RecoveryRequired(LifecycleError, SessionRefusal):
    """A transaction failed and could not put every file back: its marker
    stays (retry or abandon it). ``unsure``: why the host could not tell
    whether the marker is there, so it is named as one that may be."""

    kind = "recovery-pending"

    def __init__(
        self, session_id: str, recovery_id: str, failed: Mapping[str, str], cause: str, *, unsure: str | None = None
    ) -> None:
        listed = "; ".join(f"{path}: {why}" for path, why in sorted(failed.items()))
        if unsure is None:
            left = f"Recovery {recovery_id} keeps their old and new content; retry or abandon it"
        else:
            left = (
                f"Recovery {recovery_id} may be left (whether it is could not be read: {unsure}); retry the recovery: "
                "it finishes or undoes what is left, or says that nothing is"
            )
        SessionRefusal.__init__(self, session_id, f"{cause}; rolling the project files back failed for {listed}. {left}")
        self.recovery_id = recovery_id
        self.failed = dict(failed)
        self.cause = cause


def snapshot_digest(entries: Mapping[str, str]) -> str:
    """One digest of a logical snapshot: logical path -> SHA-256 of its bytes."""
    digest = hashlib.sha256()
    for logical in sorted(entries):
        digest.update(logical.encode("utf-8", "surrogateescape") + b"\x00" + entries[logical].encode("ascii") + b"\n")
    return digest.hexdigest()


def artifacts_digest(artifacts: Mapping[str, bytes]) -> str:
    return snapshot_digest({logical: hashlib.sha256(data).hexdigest() for logical, data in artifacts.items()})


class Journal(msgspec.Struct, frozen=True):
    marker: RecoveryMarker
    data: bytes


def _sha(content: bytes | None) -> str | None:
    return None if content is None else hashlib.sha256(content).hexdigest()


def _bytes_of(entry: Entry | None) -> bytes | None:
    return None if entry is None or entry.kind == Entry.DIRECTORY else entry.data


def journal_entry(kind: str, mode: int | None, sha: str | None, blobs: Mapping[str, bytes]) -> Entry | None:
    """The state a marker's side names (None: absent)."""
    if kind == Entry.DIRECTORY:
        return Entry.directory(mode)
    if sha is None:
        return None
    data = blobs[sha]
    return Entry.symlink(data) if kind == Entry.SYMLINK else Entry.file(data, mode)


def new_journal(
    session_id: str,
    operation: str,
    base_head: str | None,
    replacement: str,
    changes: Sequence[tuple[str, Entry | None, Entry | None]],
) -> Journal:
    """The journal of ``changes`` (path, state before, state after)."""
    blobs: dict[str, BlobSpan] = {}
    chunks: list[bytes] = []
    offset = 0
    files = []
    for path, before, after in changes:
        for entry in (before, after):
            content = _bytes_of(entry)
            digest = _sha(content)
            if content is not None and digest not in blobs:
                blobs[digest] = BlobSpan(offset=offset, size=len(content))
                chunks.append(content)
                offset += len(content)
        files.append(
            JournalFile(
                path=path,
                before=_sha(_bytes_of(before)),
                after=_sha(_bytes_of(after)),
                before_kind=before.kind if before is not None else "file",
                before_mode=before.mode if before is not None else None,
                after_kind=after.kind if after is not None else "file",
                after_mode=after.mode if after is not None else None,
            )
        )
    marker = RecoveryMarker(
        recovery_id=os.urandom(16).hex(),
        session_id=session_id,
        operation=operation,
        base_head=base_head,
        replacement=replacement,
        files=files,
        blobs=blobs,
    )
    return Journal(marker, b"".join(chunks))


def _root(paths: SessionPaths) -> str:
    return paths.inside(RECOVERY_DIR)


def marker_path(paths: SessionPaths, recovery_id: str) -> str:
    return f"{_root(paths)}/recovery-{recovery_id}.json"


def marker_read(paths: SessionPaths, recovery_id: str) -> Read:
    """The read that tells whether the host holds the marker (judged by
    :func:`marker_held`), to run in a program of the caller's."""
    return Read(marker_path(paths, recovery_id), optional=True)


def marker_held(result: OpResult) -> bool:
    """Whether :func:`marker_read` found the marker (one it cannot read is
    held all the same). A program that never wrote it never wrote a
    project file either: the marker precedes the writes in it."""
    return result.status is not Status.ABSENT


def _data_dir(paths: SessionPaths, recovery_id: str) -> str:
    return f"{_root(paths)}/{recovery_id}"


def journal_ops(paths: SessionPaths, journal: Journal) -> list[Operation]:
    """Repair bytes first, the marker last."""
    rid = journal.marker.recovery_id
    return [
        MakeDirs(_root(paths), optional=True),
        MakeDirs(_data_dir(paths, rid)),
        CreateExclusive(f"{_data_dir(paths, rid)}/{DATA_NAME}", journal.data),
        CreateExclusive(marker_path(paths, rid), _encoder.encode(journal.marker)),
    ]


def lease_proof(lease: LeaseHandle) -> list[Operation]:
    """Operations proving ``lease`` is the session's current generation:
    exactly its bytes, and nothing above it."""
    return [
        Verify(lease.paths.generation(lease.generation), lease.raw),
        Verify(lease.paths.generation(lease.generation + 1), None),
    ]


async def run_guarded(lease: LeaseHandle, ops: Sequence[Operation]):
    """Run ``ops`` behind the lease proof. A renewal that moved the
    generation meanwhile is followed (resync) and the program tried again;
    a lease that is no longer this client's raises LeaseLost."""
    for _ in range(GUARD_ATTEMPTS):
        if lease.lost or lease.released:
            raise LeaseLost(lease.session_id, "this client no longer holds the lease")
        proof = lease_proof(lease)
        result = await lease.target.run(ControlProgram([*proof, *ops]))
        if result.stopped_at is not None and result.stopped_at < len(proof):
            await lease.resync()
            continue
        return result, len(proof)
    raise LeaseLost(lease.session_id, "the lease kept moving while a guarded write was attempted")


async def guarded_converge(
    lease: LeaseHandle, wanted: Mapping[str, Entry | None], *, first: FirstReads | None = None,
    ours: Mapping[str, Sequence[Entry | None]] | None = None,
) -> ConvergeOutcome:
    """:func:`converge_files` behind the lease proof (see run_guarded)."""
    from .project_files import converge_files

    for _ in range(GUARD_ATTEMPTS):
        if lease.lost or lease.released:
            raise LeaseLost(lease.session_id, "this client no longer holds the lease")
        outcome = await converge_files(lease.target, wanted, lease_proof(lease), first=first, ours=ours)
        if outcome.guard_refused is None:
            return outcome
        await lease.resync()
    raise LeaseLost(lease.session_id, "the lease kept moving while files were restored")


def states_it_may_leave(changes: Sequence[tuple[str, Entry | None, Entry | None]]) -> dict[str, list[Entry | None]]:
    """Every state a journalled program may have left each path in: the
    one before (it stopped before the path), the one between two steps
    (absent, for a path whose kind changes; open to its owner, for a
    directory closed to it) and its new one. A path holding any other was
    changed outside the session since, and nothing that settles the
    transaction overwrites it."""
    from .project_files import ordered_steps

    states: dict[str, list[Entry | None]] = {path: [before] for path, before, _after in changes}
    for path, _before, after in ordered_steps(changes):
        states[path].append(after)
    return states


async def settle_files(
    lease: LeaseHandle, changes: Sequence[tuple[str, Entry | None, Entry | None]], *, back: bool,
    first: FirstReads | None = None,
) -> ConvergeOutcome:
    """Give every path of ``changes`` its old state (``back``) or its new
    one, behind the lease proof, except a path changed outside the session
    since (see :func:`states_it_may_leave`): left as it is and named in the
    outcome's ``left``. The one rule of a Rewind's or Redo's rollback and of
    a retried recovery."""
    wanted = {path: before if back else after for path, before, after in changes}
    return await guarded_converge(lease, wanted, first=first, ours=states_it_may_leave(changes))


def journal_changes(marker: RecoveryMarker, blobs: Mapping[str, bytes]) -> list[tuple[str, Entry | None, Entry | None]]:
    """The (path, state before, state after) a marker journals."""
    return [
        (
            f.path,
            journal_entry(f.before_kind, f.before_mode, f.before, blobs),
            journal_entry(f.after_kind, f.after_mode, f.after, blobs),
        )
        for f in marker.files
    ]


class RecoveryState(msgspec.Struct, frozen=True):
    """What ``.recovery/`` of a session holds."""

    recovery_id: str | None
    marker: RecoveryMarker | None
    #: Why the marker cannot be used (unreadable, foreign, bytes missing).
    problem: str | None
    #: Data directories whose marker is gone.
    orphans: tuple[str, ...] = ()
    #: Torn temporary files a crash left in the tree.
    debris: tuple[str, ...] = ()

    @property
    def pending(self) -> bool:
        return self.recovery_id is not None


def recovery_ids(names: Sequence[str]) -> list[str]:
    """The recovery IDs of the markers among a ``.recovery/`` listing, oldest name first."""
    return sorted(m.group(1) for m in map(_MARKER_NAME.match, names) if m)


def recovery_listing(paths: SessionPaths) -> ListDir:
    """The listing :func:`find_recovery` starts with (to run in another program)."""
    return ListDir(_root(paths), optional=True)


async def find_recovery(target: Target, session_id: str, *, listed: OpResult | None = None) -> RecoveryState:
    """The session's recovery marker (at most one is expected; the oldest
    name is reported when a second appears). ``listed``: the result of
    :func:`recovery_listing`, already run."""
    paths = SessionPaths(check_session_id(session_id))
    listing = recovery_listing(paths)
    if listed is None:
        listed = (await target.run(ControlProgram([listing])))[0]
    if listed.status is Status.ABSENT:
        return RecoveryState(None, None, None)
    raise_for_result(listing, listed)
    markers = recovery_ids(listed.value)
    orphans = tuple(name for name in listed.value if _ID_NAME.match(name) and name not in markers)
    debris = tuple(name for name in listed.value if name.startswith(".") and name.endswith(".tmp"))
    if not markers:
        return RecoveryState(None, None, None, orphans, debris)
    rid = markers[0]
    read = Read(marker_path(paths, rid), optional=True)
    got = (await target.run(ControlProgram([read])))[0]
    if not got.ok:
        return RecoveryState(rid, None, f"the marker cannot be read ({got.reason or got.status.value})", orphans, debris)
    try:
        marker = _decoder.decode(got.value)
    except msgspec.DecodeError as exc:
        return RecoveryState(rid, None, f"the marker is not a recovery record ({exc})", orphans, debris)
    if marker.recovery_id != rid or marker.session_id != session_id:
        return RecoveryState(rid, None, "the marker names another recovery or session", orphans, debris)
    return RecoveryState(rid, marker, None, orphans, debris)


async def require_no_recovery(target: Target, session_id: str) -> RecoveryState:
    """Refuse with RecoveryPending while a marker exists."""
    state = await find_recovery(target, session_id)
    if state.recovery_id is not None:
        raise RecoveryPending(session_id, state.recovery_id, state.problem)
    return state


def removal_ops(paths: SessionPaths, recovery_id: str, sweep: Sequence[Operation] = (), *, unsure: bool = False) -> list[Operation]:
    """Remove a journal: the marker first (from then on nothing blocks),
    then its bytes and directory, then the ``sweep`` of earlier remains, and
    the tree itself once it is empty. ``unsure``: its removal does not stop
    the program (the marker may never have been written, or be removed
    already, after a program whose effect is unknown; or more operations
    follow): judge it with :func:`marker_removed`."""
    return [
        Remove(marker_path(paths, recovery_id), optional=unsure),
        Remove(f"{_data_dir(paths, recovery_id)}/{DATA_NAME}", optional=True),
        Remove(_data_dir(paths, recovery_id), optional=True),
        *sweep,
        Remove(_root(paths), optional=True),
    ]


def marker_removed(result: OpResult) -> bool:
    """Whether the marker's removal (the first of :func:`removal_ops`)
    leaves no marker."""
    return result.ok or result.status is Status.ABSENT


async def sweep_ops(target: Target, paths: SessionPaths, state: RecoveryState) -> list[Operation]:
    """Optional removals of what earlier, interrupted cleanups left: data
    directories without a marker and torn temporary files."""
    ops: list[Operation] = [Remove(f"{_root(paths)}/{name}", optional=True) for name in state.debris]
    if not state.orphans:
        return ops
    listed = await target.run(ControlProgram([ListDir(_data_dir(paths, rid), optional=True) for rid in state.orphans]))
    for rid, result in zip(state.orphans, listed):
        names = result.value if result.ok else ()
        ops += [Remove(f"{_data_dir(paths, rid)}/{name}", optional=True) for name in names]
        ops.append(Remove(_data_dir(paths, rid), optional=True))
    return ops


class RecoveryOutcome(msgspec.Struct, frozen=True):
    recovery_id: str
    #: ``rolled-back`` (the old content is back), ``completed`` (the new
    #: content is in place) or ``abandoned``.
    resolution: str
    #: Project files this action wrote.
    written: tuple[str, ...] = ()
    #: Project files changed outside the session since the transaction was
    #: interrupted: left as they are (see :func:`settle_files`).
    left: tuple[str, ...] = ()

    @property
    def left_note(self) -> str | None:
        """What the person is told of ``left`` -- the CLI prints it, the
        editors show it as a warning --; None when nothing was left."""
        if not self.left:
            return None
        return (f"left as {'they are' if len(self.left) > 1 else 'it is'}, changed outside the session since the "
                f"transaction was interrupted: {', '.join(self.left)}")


async def _read_blobs(target: Target, paths: SessionPaths, marker: RecoveryMarker) -> dict[str, bytes]:
    op = Read(f"{_data_dir(paths, marker.recovery_id)}/{DATA_NAME}", optional=True)
    got = (await target.run(ControlProgram([op])))[0]
    if not got.ok:
        raise LifecycleRefused(
            marker.session_id,
            f"recovery {marker.recovery_id} cannot be retried: its repair bytes are unreadable "
            f"({got.reason or got.status.value}); abandon it",
            kind="recovery-pending",
        )
    blobs = {}
    for digest, span in marker.blobs.items():
        content = got.value[span.offset : span.offset + span.size]
        if len(content) != span.size or hashlib.sha256(content).hexdigest() != digest:
            raise LifecycleRefused(
                marker.session_id,
                f"recovery {marker.recovery_id} cannot be retried: its repair bytes do not match the marker; abandon it",
                kind="recovery-pending",
            )
        blobs[digest] = content
    return blobs


class NothingToRecover(LifecycleRefused):
    """No marker: no transaction was left half done. ``holds`` says what the
    committed session is, so that after an outcome the client could not
    learn (:class:`~..errors.OutcomeUnknown`) this is the answer to it."""

    def __init__(self, session_id: str, holds: str | None = None) -> None:
        said = f"; the session holds {holds}" if holds else ""
        super().__init__(
            session_id, f"there is no recovery to resolve: no Rewind or Redo was left half done{said}", kind="missing-target"
        )
        self.holds = holds


async def _marker_of(lease: LeaseHandle, recovery_id: str | None) -> RecoveryState:
    state = await find_recovery(lease.target, lease.session_id)
    if state.recovery_id is None:
        raise NothingToRecover(lease.session_id)
    if recovery_id is not None and recovery_id != state.recovery_id:
        raise LifecycleRefused(lease.session_id, f"the pending recovery is {state.recovery_id}, not {recovery_id}", kind="missing-target")
    return state


async def retry_recovery(lease: LeaseHandle, recovery_id: str | None = None) -> RecoveryOutcome:
    """Finish the interrupted transaction in whichever direction its commit
    point decided, then remove the marker and its bytes."""
    state = await _marker_of(lease, recovery_id)
    marker = state.marker
    if marker is None:
        raise LifecycleRefused(lease.session_id, f"recovery {state.recovery_id} cannot be retried: {state.problem}; abandon it", kind="recovery-pending")
    if marker.abandoning:
        raise LifecycleRefused(lease.session_id, f"abandoning recovery {marker.recovery_id} was already approved; abandon it again to finish", kind="recovery-pending")
    from .project_files import project_path_problem

    unsafe = [f.path for f in marker.files if project_path_problem(f.path) is not None]
    if unsafe:
        raise LifecycleRefused(
            lease.session_id, f"recovery {marker.recovery_id} names paths that are not project files ({', '.join(unsafe)}); abandon it",
            kind="recovery-pending",
        )
    if lease.needs_resync:
        await lease.resync()
    paths = lease.paths
    blobs = await _read_blobs(lease.target, paths, marker)
    head = lease.publication_head
    if head == marker.base_head:
        resolution = "rolled-back"
    else:
        committed = None
        if head is not None:
            try:
                manifest = await load_manifest(lease.target, paths, head)
            except RecordError:
                manifest = None
            if manifest is not None:
                committed = snapshot_digest({logical: entry.sha256 for logical, entry in manifest.entries.items()})
        if committed != marker.replacement:
            raise LifecycleRefused(
                lease.session_id,
                f"recovery {marker.recovery_id} cannot be retried: the session's head moved on since its "
                f"{marker.operation} was interrupted; abandon it (the project files stay as they are)",
                kind="recovery-pending",
            )
        resolution = "completed"
    outcome = await settle_files(lease, journal_changes(marker, blobs), back=resolution == "rolled-back")
    if outcome.failed:
        raise RecoveryRequired(lease.session_id, marker.recovery_id, outcome.failed, f"retrying recovery {marker.recovery_id} did not finish")
    cleanup = removal_ops(paths, marker.recovery_id, await sweep_ops(lease.target, paths, state))
    result, proof = await run_guarded(lease, cleanup)
    _raise_stopped(cleanup, result, proof)
    return RecoveryOutcome(marker.recovery_id, resolution, outcome.written, outcome.left)


async def abandon_recovery(lease: LeaseHandle, recovery_id: str | None = None) -> RecoveryOutcome:
    """Destructive: drop the repair material, leaving the project files as
    they are. The approval is recorded in the marker before any byte goes."""
    state = await _marker_of(lease, recovery_id)
    paths = lease.paths
    rid = state.recovery_id
    assert rid is not None
    ops: list[Operation] = []
    marker = state.marker
    if marker is not None and not marker.abandoning:
        approved = msgspec.structs.replace(marker, abandoning=True)
        result, proof = await run_guarded(lease, [Replace(marker_path(paths, rid), _encoder.encode(approved))])
        _raise_stopped([Replace(marker_path(paths, rid), b"")], result, proof)
    listed = (await lease.target.run(ControlProgram([ListDir(_data_dir(paths, rid), optional=True)])))[0]
    names = listed.value if listed.ok else ()
    ops += [Remove(f"{_data_dir(paths, rid)}/{name}", optional=True) for name in names]
    ops.append(Remove(_data_dir(paths, rid), optional=True))
    ops.append(Remove(marker_path(paths, rid)))
    ops += await sweep_ops(lease.target, paths, state)
    ops.append(Remove(_root(paths), optional=True))
    result, proof = await run_guarded(lease, ops)
    _raise_stopped(ops, result, proof)
    return RecoveryOutcome(rid, "abandoned")


def _raise_stopped(ops: Sequence[Operation], result, proof: int) -> None:
    if result.stopped_at is None:
        return
    index = result.stopped_at - proof
    raise_for_result(ops[index], result[result.stopped_at])
