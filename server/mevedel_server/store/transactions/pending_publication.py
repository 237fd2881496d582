"""The durable record of a publication that failed before its commit point.

A save whose publication the target refused (or could not be reached for)
leaves the prior head authoritative and the session *publication pending*
(:mod:`..service.open_session`). So that the pending state outlives the
process -- an exit, a crash, a CLI command ending -- before anyone retries
or abandons it, the lease owner journals it inside the session directory,
through the target, the way a Rewind journals its recovery::

    <session>/.pending-publication/
      <32 hex>.data                 the pending artifacts' bytes, concatenated
      pending-<32 hex>.json         the marker, written after the bytes

The marker (:class:`PendingMarker`) names the head the publication was
planned over (``base_head``), its flags, why it failed, who left it, and for
each logical path the SHA-256 and span of its bytes. Both writes run behind
the lease proof: only the owner of the current generation records one.

The next owner that resumes the session (this process, another process of
the same client, or a client that took the lease over) finds the marker and
the session opens *publication pending* again: mutations are refused until
a retry or an abandonment. A retry publishes exactly the recorded artifacts
over the committed head, and only while that head is still ``base_head``
(the snapshot the pending one was planned against); a session that moved on
can only abandon it. A marker whose every artifact the committed head
already holds is the trace of a retry that committed and stopped before
its cleanup: it is removed on sight.

A record the target could not take because its host could not be reached
is *spooled* on this machine instead (a CLI command ends; an editor's
process may too): the same files in ``unrecorded/<workspace>/<session>/``
of this user's state directory (:func:`workspace_spool`, :func:`spool_pending`),
one spool for every client on this machine -- the CLI, ``mevedel mcp`` and
the language server. The next of them to resume the session moves them
into the session directory behind its lease proof (:func:`unspool_pending`),
where they are found as any other record: the head may already hold them (a
publication whose answer was lost), or they are pending again. The lease
is what keeps two resumers from both moving it: the proof fails for all
but the current generation, and a record keeps its ID, so a move repeated
after an interruption writes the same record again, never a second one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated

import msgspec

from ...lazy_decoder import LazyDecoder
from ...targets import (
    ControlProgram,
    CreateExclusive,
    ListDir,
    MakeDirs,
    Operation,
    OpResult,
    Read,
    Remove,
    Replace,
    Status,
    Target,
    raise_for_result,
)
from ..authority.lease import ClientIdentity, LeaseHandle
from ..authority.publication import load_manifest
from ..authority.records import HEAD_PATTERN
from ..layout import SessionPaths
from .recovery import run_guarded

if TYPE_CHECKING:
    from ...targets import SshLocation

PENDING_DIR = ".pending-publication"
#: Where a spool (a local directory) keeps records by session.
SPOOL_DIR = "unrecorded"
PENDING_FORMAT_VERSION = 1
_MARKER_NAME = re.compile(r"^pending-([0-9a-f]{32})\.json\Z")
_ID_NAME = re.compile(r"^([0-9a-f]{32})\.data\Z")

Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]


class PendingEntry(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    sha256: Sha256
    offset: Annotated[int, msgspec.Meta(ge=0)]
    size: Annotated[int, msgspec.Meta(ge=0)]


class PendingMarker(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    format_version: int = PENDING_FORMAT_VERSION
    pending_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}\Z")]
    session_id: str
    #: The client and host whose save failed (shown to people; not authority).
    client_id: str
    host: Annotated[str, msgspec.Meta(max_length=255)]
    #: Target seconds when the failure was recorded.
    recorded_at: int
    #: The committed head the publication was planned over (None: none yet).
    base_head: Annotated[str, msgspec.Meta(pattern=HEAD_PATTERN)] | None
    replace: bool
    force: bool
    reason: Annotated[str, msgspec.Meta(max_length=4096)]
    entries: dict[str, PendingEntry]


_log = logging.getLogger(__name__)
_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = LazyDecoder(msgspec.json.Decoder, PendingMarker)


class FoundPending(msgspec.Struct, frozen=True):
    """What ``.pending-publication/`` of a session holds."""

    marker: PendingMarker | None
    #: Why a marker that exists cannot be used (it can only be abandoned).
    problem: str | None = None
    #: The marker's ID even when it is unreadable.
    pending_id: str | None = None


def _root(paths: SessionPaths) -> str:
    return paths.inside(PENDING_DIR)


class PendingSpool(msgspec.Struct, frozen=True):
    """Where a client keeps the saves its host could not record: ``target``
    on this machine, and ``workspace``, a name of the workspace (a digest of
    its location) that keeps one workspace's records from another's -- a
    copied workspace has sessions of the same IDs."""

    target: Target
    workspace: str


def workspace_spool(
    location: str | os.PathLike[str] | SshLocation, state: str | os.PathLike[str] | None = None
) -> PendingSpool | None:
    """This machine's spool for the workspace at ``location``: the client's
    state directory ``state`` (default: this user's), in a part named by
    the workspace's location (the same session ID can live in two
    workspaces, a copy). None for a workspace on this machine, which is
    never out of reach: no spool to open, nor to look in at every resume."""
    if isinstance(location, (str, os.PathLike)):
        return None
    from ...state_directory import client_state_directory
    from ...targets import LocalTarget

    digest = hashlib.sha256(location.uri.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    directory = client_state_directory(state)
    os.makedirs(directory, exist_ok=True)  # a target's root exists (the first client here makes it)
    return PendingSpool(LocalTarget(directory), digest)


def _spooled(spool: PendingSpool, session_id: str) -> str:
    return f"{SPOOL_DIR}/{spool.workspace}/{session_id}"


def _marker(directory: str, pending_id: str) -> str:
    return f"{directory}/pending-{pending_id}.json"


def _data(directory: str, pending_id: str) -> str:
    return f"{directory}/{pending_id}.data"


def _record_ops(directory: str, marker: PendingMarker, data: bytes) -> list[Operation]:
    """The bytes first, the marker last. Both are named by the record's
    fresh ID, so a file of either name is an earlier copy of this record (a
    write whose answer was lost, a move that stopped before its spooled
    copy was dropped): the bytes are written again, the marker kept."""
    return [
        MakeDirs(directory, optional=True),
        Replace(_data(directory, marker.pending_id), data),
        CreateExclusive(_marker(directory, marker.pending_id), _encoder.encode(marker)),
    ]


def _judge_record(ops: list[Operation], results) -> None:
    for op, op_result in zip(ops, results):
        if op_result.status is Status.CONFLICT and op is not ops[1]:
            continue  # the directory, or this very marker, is there already
        raise_for_result(op, op_result)


class Recorded(msgspec.Struct, frozen=True):
    """A record as it is written: its marker and its bytes."""

    marker: PendingMarker
    data: bytes


def new_record(
    session_id: str,
    client: ClientIdentity,
    *,
    artifacts: Mapping[str, bytes],
    base_head: str | None,
    replace: bool,
    force: bool,
    reason: str,
    at: int,
) -> Recorded:
    """The record of a failed publication, under a new ID."""
    entries: dict[str, PendingEntry] = {}
    chunks: list[bytes] = []
    offset = 0
    for logical in sorted(artifacts):
        data = bytes(artifacts[logical])
        entries[logical] = PendingEntry(sha256=hashlib.sha256(data).hexdigest(), offset=offset, size=len(data))
        chunks.append(data)
        offset += len(data)
    marker = PendingMarker(
        pending_id=secrets.token_hex(16),
        session_id=session_id,
        client_id=client.client_id,
        host=client.host,
        recorded_at=at,
        base_head=base_head,
        replace=replace,
        force=force,
        reason=reason[:4096],
        entries=entries,
    )
    return Recorded(marker, b"".join(chunks))


async def record_pending(lease: LeaseHandle, record: Recorded) -> None:
    """Journal a failed publication (bytes first, the marker last) behind
    the lease proof. Raises LeaseLost when this client no longer owns the
    session, a TargetError when the target refuses."""
    ops = _record_ops(_root(lease.paths), record.marker, record.data)
    result, skip = await run_guarded(lease, ops)
    _judge_record(ops, result.results[skip:])


async def spool_pending(spool: PendingSpool, record: Recorded) -> None:
    """Keep ``record`` on this machine (in ``spool``) for the session
    directory that could not take it. Raises a TargetError when this
    machine refuses too."""
    ops = _record_ops(_spooled(spool, record.marker.session_id), record.marker, record.data)
    _judge_record(ops, (await spool.target.run(ControlProgram(ops))).results)


class Unspooled(msgspec.Struct, frozen=True):
    """What :func:`unspool_pending` found of a session in the spool."""

    #: The spool held something of the session (moved or dropped).
    found: bool = False
    #: The record this call wrote into the session directory (None: none,
    #: or the same record was there already -- another resumer moved it).
    recorded: PendingMarker | None = None


async def unspool_pending(spool: PendingSpool, lease: LeaseHandle) -> Unspooled:
    """Move what :func:`spool_pending` kept of ``lease``'s session into the
    session directory, behind the lease proof, then drop it here. A spooled
    record that cannot be read is dropped with a warning in the log: it
    never was the session's."""
    directory = _spooled(spool, lease.session_id)
    found = await _find(spool.target, directory, lease.session_id)
    if found.pending_id is None:
        return Unspooled()
    recorded = None
    if found.marker is not None:
        try:
            data = await _read(spool.target, directory, found.marker)
        except ValueError as bad:
            _log.warning("session %s: a pending publication kept on this machine is dropped: %s", lease.session_id, bad)
        else:
            ops = _record_ops(_root(lease.paths), found.marker, data)
            result, skip = await run_guarded(lease, ops)
            _judge_record(ops, result.results[skip:])
            if result.results[skip + 2].status is not Status.CONFLICT:
                recorded = found.marker
    else:
        _log.warning("session %s: a pending publication kept on this machine is dropped: %s", lease.session_id, found.problem)
    await spool.target.run(ControlProgram(await _removal_ops(spool.target, directory, found.pending_id)))
    return Unspooled(True, recorded)  # a removal that failed is tried again by the next resume


async def drop_spooled(spool: PendingSpool, marker: PendingMarker) -> None:
    """Drop a spooled record (the host took it, or it was abandoned)."""
    directory = _spooled(spool, marker.session_id)
    ops = await _removal_ops(spool.target, directory, marker.pending_id)
    result = await spool.target.run(ControlProgram(ops))
    for op, op_result in zip(ops, result.results):
        if op is not ops[-1] and op_result.status is not Status.ABSENT:
            raise_for_result(op, op_result)


def pending_listing(paths: SessionPaths) -> ListDir:
    """The listing :func:`find_pending` starts with (to run in another program)."""
    return ListDir(_root(paths), optional=True)


async def find_pending(target: Target, paths: SessionPaths, *, listed: OpResult | None = None) -> FoundPending:
    """The session's pending-publication marker (the oldest, should a
    second appear), read and checked. ``listed``: the result of
    :func:`pending_listing`, already run."""
    return await _find(target, _root(paths), paths.session_id, listed=listed)


async def _find(target: Target, directory: str, session_id: str, *, listed: OpResult | None = None) -> FoundPending:
    listing = ListDir(directory, optional=True)
    if listed is None:
        listed = (await target.run(ControlProgram([listing])))[0]
    if listed.status is Status.ABSENT:
        return FoundPending(None)
    raise_for_result(listing, listed)
    ids = sorted(m.group(1) for m in map(_MARKER_NAME.match, listed.value) if m)
    if not ids:
        return FoundPending(None)
    pid = ids[0]
    read = Read(_marker(directory, pid), optional=True)
    got = (await target.run(ControlProgram([read])))[0]
    if got.status is Status.ABSENT:
        # Removed since the listing (the marker goes first): nothing pending.
        return FoundPending(None)
    if not got.ok:
        return FoundPending(None, f"its record cannot be read ({got.reason or got.status.value})", pid)
    try:
        marker = _decoder.decode(got.value)
    except msgspec.DecodeError as exc:
        return FoundPending(None, f"its record is not a pending publication ({exc})", pid)
    if marker.pending_id != pid or marker.session_id != session_id:
        return FoundPending(None, "its record names another publication or session", pid)
    return FoundPending(marker, None, pid)


async def read_pending(target: Target, paths: SessionPaths, marker: PendingMarker) -> dict[str, bytes]:
    """The recorded artifacts, each checked against its SHA-256. Raises
    ValueError naming what is wrong."""
    data = await _read(target, _root(paths), marker)
    return {logical: data[entry.offset : entry.offset + entry.size] for logical, entry in marker.entries.items()}


async def _read(target: Target, directory: str, marker: PendingMarker) -> bytes:
    """A record's bytes, each artifact checked against its SHA-256."""
    op = Read(_data(directory, marker.pending_id), optional=True)
    got = (await target.run(ControlProgram([op])))[0]
    if not got.ok:
        raise ValueError(f"its bytes cannot be read ({got.reason or got.status.value})")
    for logical, entry in marker.entries.items():
        data = got.value[entry.offset : entry.offset + entry.size]
        if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
            raise ValueError(f"its bytes for {logical} do not match the record")
    return bytes(got.value)


async def already_committed(lease: LeaseHandle, marker: PendingMarker) -> bool:
    """The committed head holds every recorded artifact: the publication
    committed (a retry that stopped before its cleanup)."""
    head = lease.publication_head
    if head is None or head == marker.base_head:
        return False
    manifest = await load_manifest(lease.target, lease.paths, head)
    return all(
        (entry := manifest.entries.get(logical)) is not None and entry.sha256 == recorded.sha256
        for logical, recorded in marker.entries.items()
    )


async def remove_pending(lease: LeaseHandle, pending_id: str | None) -> None:
    """Remove a marker (first: from then on nothing is pending), its bytes,
    stray bytes of earlier records, and the directory once empty."""
    ops = await _removal_ops(lease.target, _root(lease.paths), pending_id)
    result, skip = await run_guarded(lease, ops)
    for op, op_result in zip(ops, result.results[skip:]):
        if op is not ops[-1] and op_result.status is not Status.ABSENT:
            raise_for_result(op, op_result)


def removal_ops(paths: SessionPaths, pending_id: str) -> list[Operation]:
    """The removal of one record (marker first) and of its directory when
    that empties it, without a listing first: to ride a program that makes
    the record history (a release that publishes what it held)."""
    directory = _root(paths)
    return [
        Remove(_marker(directory, pending_id), optional=True),
        Remove(_data(directory, pending_id), optional=True),
        Remove(directory, optional=True),
    ]


async def _removal_ops(target: Target, directory: str, pending_id: str | None) -> list[Operation]:
    listing = ListDir(directory, optional=True)
    listed = (await target.run(ControlProgram([listing])))[0]
    names = listed.value if listed.ok else ()
    ops: list[Operation] = [Remove(_marker(directory, pending_id), optional=True)] if pending_id else []
    ops += [Remove(f"{directory}/{name}", optional=True) for name in names if _ID_NAME.match(name) or name.endswith(".tmp")]
    if pending_id:
        ops.append(Remove(_data(directory, pending_id), optional=True))
    ops.append(Remove(directory, optional=True))
    return ops
