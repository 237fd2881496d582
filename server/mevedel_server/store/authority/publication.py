"""Immutable publications and the one commit point.

A publication is a never-overwritten directory
``<session>/.publications/<32 hex>/`` holding the new artifact bytes
(``000001.data``, ``000002.data``...) and ``manifest.json``, written last,
which maps every logical path of the session snapshot to its published path,
SHA-256 and size. An unchanged payload is not rewritten: its entry points at
the immutable bytes of an earlier publication still named by the committed
manifest.

The directory, its artifacts, its manifest and the lease rotation that
names the manifest as ``publication_head`` are one control program
(:meth:`LeaseHandle.commit`): the exclusive creation of the next lease
generation, after a verify of the current one, is the only commit point.
The publication's writes are deferred and flushed together by one barrier
just before that rotation, so the head becomes durable only after every
byte it names is.
Until it succeeds the prior head stays authoritative and the attempt is
*pending* for the writer (:attr:`Publisher.pending`) until
:meth:`Publisher.retry` or :meth:`Publisher.abandon`. A reader follows only
the head, so it sees the whole old snapshot or the whole new one; an
uncommitted publication directory is inert (collection removes it later).

A save whose snapshot equals the committed one performs no transaction.
``replace=True`` starts from an empty manifest (lifecycle replacements such as
Rewind); ``force=True`` publishes even an unchanged snapshot. ``lead``
operations run first in the commit's program (a Rewind's checks, journal
and project-file writes, flushed by the publication's barrier): one that
stops it raises :class:`~.lease.LeadStopped`, nothing published.
``release`` makes the commit the lease's release as well (a granted control
transfer's: :meth:`~.lease.LeaseHandle.release_with`): the released
generation names the new head, so a reader sees this holder's old state
held or its new state released, never the old state released; with an
unchanged snapshot the release is made alone, in one program all the same.
A release whose publication failed is retried as the release
(:meth:`Publisher.retry` with ``release``); one that committed with its
answer lost is found so by the retry, which then writes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from ...targets import (
    Barrier,
    ControlProgram,
    CreateExclusive,
    CreateLinked,
    MakeDirs,
    Operation,
    OpResult,
    Read,
    Status,
    Target,
    TargetError,
    TargetUnavailable,
    raise_for_result,
)
from ..errors import (
    LeaseLost,
    PublicationFailed,
    PublicationPending,
    PublicationUnknown,
    SessionRefusal,
    StoreError,
)
from ..layout import (
    MANIFEST_NAME,
    SessionPaths,
    head_path,
    publication_id_of,
    published_path,
)
from .lease import LeadStopped, LeaseHandle, read_lease_head_and_manifest
from .packed import Pack, read_pack
from .records import (
    HEAD_PATTERN,
    LeaseState,
    ManifestEntry,
    PublicationManifest,
    RecordError,
    RecordErrorKind,
    check_logical_path,
    decode_record,
    encode_record,
)
from .workspace import check_session_id

_ID_ATTEMPTS = 4


class PublishOutcome(msgspec.Struct, frozen=True):
    #: False when the snapshot was identical and nothing was written.
    committed: bool
    head: str | None
    manifest: PublicationManifest | None
    #: Logical paths whose bytes this publication wrote.
    written: tuple[str, ...] = ()
    #: Logical paths (new or changed) that point at earlier immutable bytes.
    reused: tuple[str, ...] = ()


class PendingPublication(msgspec.Struct, frozen=True):
    artifacts: Mapping[str, bytes]
    replace: bool
    force: bool
    reason: str
    donors: Mapping[tuple[str, int], str] = msgspec.field(default_factory=dict)


#: Published files of another session that may hold bytes a publication
#: writes: ``(sha256, size)`` -> target-relative path.
Donors = Mapping[tuple[str, int], str]


def new_publication_id() -> str:
    return os.urandom(16).hex()


async def load_manifest(target: Target, paths: SessionPaths, head: str) -> PublicationManifest:
    """Read and validate the manifest a publication head names."""
    label = paths.label(head)
    if not re.match(HEAD_PATTERN, head):
        raise RecordError(RecordErrorKind.INVALID_VALUE, label, "not a publication head path")
    op = Read(paths.inside(head))
    result = (await target.run(ControlProgram([op])))[0]
    if result.status is Status.ABSENT:
        # A generation collection moved into the session's pack.
        raw = (await read_pack(target, paths)).manifest_bytes(publication_id_of(head))
        if raw is None:
            raise RecordError(RecordErrorKind.MISSING, label, "the committed manifest is missing")
        return _decode_manifest(paths, head, raw)
    raise_for_result(op, result)
    return _decode_manifest(paths, head, result.value)


def _decode_manifest(paths: SessionPaths, head: str, raw: bytes) -> PublicationManifest:
    return decode_manifest(paths.label(head), publication_id_of(head), raw)


def decode_manifest(label: str, publication_id: str, raw: bytes) -> PublicationManifest:
    """A manifest, refused unless it names its own publication directory."""
    manifest = decode_record(PublicationManifest, raw, label)
    if manifest.publication_id != publication_id:
        raise RecordError(
            RecordErrorKind.INVALID_VALUE, label, f"names publication {manifest.publication_id}, not its own directory"
        )
    return manifest


def _check_bytes(paths: SessionPaths, logical: str, entry: ManifestEntry, status: Status, data: bytes | None) -> bytes:
    label = paths.label(f"{entry.published} ({logical})")
    if status is Status.ABSENT or data is None:
        raise RecordError(RecordErrorKind.MISSING, label, "published bytes named by the manifest are missing")
    if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
        raise RecordError(RecordErrorKind.DIGEST_MISMATCH, label, "published bytes do not match the manifest's SHA-256")
    return data


class CommittedSnapshot(msgspec.Struct, frozen=True):
    """The committed state of a session as one reader saw it."""

    target: Target
    paths: SessionPaths
    lease_generation: int
    head: str | None
    manifest: PublicationManifest | None

    @property
    def session_id(self) -> str:
        return self.paths.session_id

    @property
    def published(self) -> bool:
        return self.manifest is not None

    def logical_paths(self) -> list[str]:
        return sorted(self.manifest.entries) if self.manifest else []

    async def read(self, logical: str) -> bytes:
        """The bytes of one logical path, verified against the manifest."""
        if self.manifest is None or logical not in self.manifest.entries:
            raise KeyError(f"session {self.session_id} has no committed {logical!r}")
        return (await self._read_verified([(logical, self.manifest.entries[logical])]))[logical]

    async def read_many(self, logicals: Iterable[str]) -> dict[str, bytes]:
        """Several logical paths, read in one program and each verified."""
        wanted = list(dict.fromkeys(logicals))
        if not wanted:
            return {}
        entries = self.manifest.entries if self.manifest else {}
        for logical in wanted:
            if logical not in entries:
                raise KeyError(f"session {self.session_id} has no committed {logical!r}")
        return await self._read_verified([(logical, entries[logical]) for logical in wanted])

    async def read_all(self) -> dict[str, bytes]:
        """Every logical path, read in one program and each verified."""
        if self.manifest is None:
            return {}
        return await self._read_verified(sorted(self.manifest.entries.items()))

    async def read_all_with(self, also: Sequence[Operation]) -> tuple[dict[str, bytes], tuple[OpResult, ...]]:
        """:meth:`read_all`, with ``also`` (reads of something else) run in
        the same program after it; their results."""
        extra: list[tuple[OpResult, ...]] = []
        entries = sorted(self.manifest.entries.items()) if self.manifest is not None else []
        return await self._read_verified(entries, also, extra), extra[0]

    def payload_reads(self) -> list[Operation]:
        """The reads of :meth:`read_all`, to run inside another program
        (optional: they never stop it); judge them with :meth:`verified`."""
        entries = sorted(self.manifest.entries.items()) if self.manifest is not None else []
        return self._reads(entries)

    async def verified(self, results: Sequence[OpResult]) -> dict[str, bytes]:
        """What :meth:`payload_reads`' ``results`` hold, each verified
        against the manifest (a payload packed since is read from the pack)."""
        entries = sorted(self.manifest.entries.items()) if self.manifest is not None else []
        return await self._verify(entries, self._reads(entries), results)

    def _reads(self, items: list[tuple[str, ManifestEntry]]) -> list[Operation]:
        return [Read(self.paths.inside(entry.published), optional=True) for _, entry in items]

    async def _read_verified(
        self, items: list[tuple[str, ManifestEntry]], also: Sequence[Operation] = (), extra: list | None = None
    ) -> dict[str, bytes]:
        ops = self._reads(items)
        result = await self.target.run(ControlProgram([*ops, *also]))
        if extra is not None:
            extra.append(tuple(result.results[len(ops) :]))
        return await self._verify(items, ops, result.results)

    async def _verify(self, items: list[tuple[str, ManifestEntry]], ops: list[Operation], results: Sequence[OpResult]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        pack: Pack | None = None
        for (logical, entry), op, op_result in zip(items, ops, results):
            if op_result.status not in (Status.OK, Status.ABSENT):
                raise_for_result(op, op_result)
            status, data = op_result.status, op_result.value
            if status is Status.ABSENT:
                # A packed generation's bytes live in the pack once its
                # directory is gone (the entry still names the loose file).
                pack = pack or await read_pack(self.target, self.paths)
                data = pack.get(entry.sha256, entry.size)
                status = Status.OK if data is not None else Status.ABSENT
            out[logical] = _check_bytes(self.paths, logical, entry, status, data)
        return out


async def read_committed(target: Target, session_id: str) -> CommittedSnapshot:
    """The committed snapshot a fresh reader sees: the head of the current
    lease generation and its validated manifest (no lease is taken)."""
    paths = SessionPaths(check_session_id(session_id))
    obs, raw = await read_lease_head_and_manifest(target, paths)
    head = obs.publication_head
    if head is None:
        manifest = None
    elif raw is not None and re.match(HEAD_PATTERN, head):
        manifest = _decode_manifest(paths, head, raw)
    else:
        manifest = await load_manifest(target, paths, head)
    return CommittedSnapshot(target, paths, obs.generation, head, manifest)


def donors_of(snapshot: CommittedSnapshot) -> dict[tuple[str, int], str]:
    """Every published file ``snapshot``'s manifest names, as donors."""
    entries = snapshot.manifest.entries if snapshot.manifest else {}
    return {(e.sha256, e.size): snapshot.paths.inside(e.published) for e in entries.values()}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Publisher:
    """Publishes snapshots of one session through the lease this client holds."""

    def __init__(self, lease: LeaseHandle) -> None:
        self.lease = lease
        self._pending: PendingPublication | None = None
        self._committed: tuple[str, PublicationManifest] | None = None
        #: The head and manifest of the commit running now (what a
        #: :attr:`~.lease.Rider.compose` of that commit may read along).
        self.committing: tuple[str, PublicationManifest] | None = None
        # Each attempt plans against the committed manifest, so two attempts
        # must not interleave or the later would drop the earlier's entries.
        self._serial = asyncio.Lock()

    @property
    def pending(self) -> PendingPublication | None:
        return self._pending

    @property
    def serial(self) -> asyncio.Lock:
        """Held while a publication is attempted; background work that must
        not interleave with one (publication collection) holds it too."""
        return self._serial

    def abandon(self) -> PendingPublication | None:
        """Drop the pending publication; the committed head stays as it is."""
        pending, self._pending = self._pending, None
        return pending

    async def retry(
        self, *, lead: Sequence[Operation] = (), release: Mapping[str, object] | None = None, trailing: Sequence[Operation] = ()
    ) -> PublishOutcome:
        """Publish the pending publication again; ``lead``, ``release``,
        ``trailing``: as :meth:`publish`'s (a release's own publication is
        retried as the release)."""
        async with self._serial:
            if self._pending is None:
                raise SessionRefusal(self.lease.session_id, "no publication is pending")
            pending = self._pending
            outcome = await self._attempt(
                pending.artifacts, pending.replace, pending.force, pending.donors, tuple(lead), release, tuple(trailing)
            )
            self._pending = None
            return outcome

    async def publish(
        self, artifacts: Mapping[str, bytes], *, replace: bool = False, force: bool = False, donors: Donors = {},
        lead: Sequence[Operation] = (), release: Mapping[str, object] | None = None, trailing: Sequence[Operation] = (),
    ) -> PublishOutcome:
        """Publish ``artifacts`` (logical path -> bytes) over the committed
        snapshot, or instead of it with ``replace``. A new file whose bytes a
        donor (:func:`donors_of`) holds is hard-linked to it, not written
        (:class:`~mevedel_server.targets.CreateLinked` checks the bytes).
        ``lead`` runs first in the commit's program, when there is one (see
        the module); a lead that stops it raises
        :class:`~.lease.LeadStopped` and leaves nothing pending.
        ``release``: the commit releases the lease too, with these changes
        of the released generation (see the module); a failure of a
        release alone leaves nothing pending (nothing was to publish).
        ``trailing`` (optional operations, with ``release`` only) run in the
        release's program once the released generation is written."""
        for logical in artifacts:
            check_logical_path(logical)
        snapshot = {logical: bytes(data) for logical, data in artifacts.items()}
        async with self._serial:
            if self._pending is not None:
                raise PublicationPending(self.lease.session_id, self._pending.reason)
            return await self._attempt(snapshot, replace, force, donors, tuple(lead), release, tuple(trailing))

    def known_manifest(self, head: str) -> PublicationManifest | None:
        """The manifest of ``head`` when this publisher knows it (read at
        open, or published here), without a read."""
        return self._committed[1] if self._committed is not None and self._committed[0] == head else None

    @property
    def known_head(self) -> tuple[str, PublicationManifest] | None:
        """The committed head and its manifest, when this publisher knows
        them without a read."""
        committed = self._committed
        return committed if committed is not None and committed[0] == self.lease.publication_head else None

    def know_committed(self, head: str, manifest: PublicationManifest) -> None:
        """The manifest of ``head``, already read and validated by the
        caller: a publication over that head need not read it again."""
        self._committed = (head, manifest)

    async def committed_manifest(self) -> PublicationManifest | None:
        head = self.lease.publication_head
        if head is None:
            return None
        if self._committed is None or self._committed[0] != head:
            self._committed = (head, await load_manifest(self.lease.target, self.lease.paths, head))
        return self._committed[1]

    async def _attempt(
        self, artifacts: Mapping[str, bytes], replace: bool, force: bool, donors: Donors, lead: tuple[Operation, ...] = (),
        release: Mapping[str, object] | None = None, trailing: tuple[Operation, ...] = (),
    ) -> PublishOutcome:
        if trailing and release is None:
            raise ValueError("only a release carries trailing operations")

        def pend(reason: str) -> None:
            self._pending = PendingPublication(dict(artifacts), replace, force, reason, dict(donors))

        try:
            if self.lease.needs_resync:
                await self.lease.resync()
            committed = await self.committed_manifest()
        except LeaseLost as exc:
            pend(exc.reason)
            raise
        except (TargetError, RecordError) as exc:
            pend(str(exc))
            raise PublicationFailed(self.lease.session_id, str(exc)) from exc
        for _ in range(_ID_ATTEMPTS):
            plan = _plan(self.lease.paths, committed, artifacts, replace, new_publication_id(), donors)
            if (plan.manifest.entries == committed.entries if committed is not None else not plan.manifest.entries) and not force:
                if release is not None and not self._released_with(release):
                    await self._release_alone(lead, release, trailing)
                return PublishOutcome(False, self.lease.publication_head, committed)
            self.committing = (plan.head, plan.manifest)
            try:
                if release is not None:
                    # No rider: what rides a head commit runs behind this
                    # holder's proof, and a release ends it.
                    result = await self.lease.release_with([*lead, *plan.ops], trailing=trailing, publication_head=plan.head, **release)
                else:
                    result = await self.lease.commit([*lead, *plan.ops], publication_head=plan.head, **_closing_window(self.lease))
            except LeaseLost as exc:
                pend(exc.reason)
                raise
            except Exception as exc:
                try:
                    if await self._committed_despite(plan.head):
                        break
                except LeaseLost as lost:
                    pend(lost.reason)
                    raise
                except TargetUnavailable as unreachable:
                    unknown = PublicationUnknown(self.lease.session_id, exc, unreachable)
                    pend(unknown.reason)
                    raise unknown from exc
                pend(str(exc))
                raise PublicationFailed(self.lease.session_id, str(exc)) from exc
            if result.stopped_at is not None and result.stopped_at < len(lead):
                raise LeadStopped(result)
            if result.stopped_at is not None and result.stopped_at < len(lead) + len(plan.ops):
                at = result.stopped_at - len(lead)
                if not lead and at == plan.directory_index and result[result.stopped_at].status is Status.CONFLICT:
                    continue  # that publication name is taken: draw another (a lead's writes are not run twice)
                failed = result[result.stopped_at]
                why = failed.reason or failed.status.value
                reason = f"not flushed to disk: {why}" if isinstance(plan.ops[at], Barrier) else f"{plan.ops[at].path}: {why}"
                pend(reason)
                raise PublicationFailed(self.lease.session_id, reason)
            break
        else:
            pend("could not reserve a publication directory")
            raise PublicationFailed(self.lease.session_id, "could not reserve a publication directory")
        self._committed = (plan.head, plan.manifest)
        return PublishOutcome(True, plan.head, plan.manifest, plan.written, plan.reused)

    def _released_with(self, changes: Mapping[str, object]) -> bool:
        """An earlier attempt of this release committed, its answer lost
        (the resync found the lease released by this client with these
        changes): what it published is the committed head, nothing is left
        to do."""
        record = self.lease.record
        return self.lease.released and all(getattr(record, key) == value for key, value in changes.items())

    async def _release_alone(
        self, lead: tuple[Operation, ...], changes: Mapping[str, object], trailing: tuple[Operation, ...] = ()
    ) -> None:
        await self.lease.release_after(lead, trailing=trailing, **changes)

    async def _committed_despite(self, head: str) -> bool:
        """After a program whose outcome is unknown, find out whether its
        head commit happened (the commit point may precede the failure). A
        host that cannot be reached to tell raises its TargetUnavailable."""
        try:
            await self.lease.resync()
        except (LeaseLost, TargetUnavailable):
            raise
        except (StoreError, TargetError):
            return False
        return self.lease.publication_head == head


def _closing_window(lease: LeaseHandle) -> dict:
    # A head commit closes an open publishing window.
    return {"state": LeaseState.ACTIVE} if lease.record.state is LeaseState.PUBLISHING else {}


class _Plan(msgspec.Struct, frozen=True):
    head: str
    manifest: PublicationManifest
    ops: list[Operation]
    directory_index: int
    written: tuple[str, ...]
    reused: tuple[str, ...]


def _plan(
    paths: SessionPaths,
    committed: PublicationManifest | None,
    artifacts: Mapping[str, bytes],
    replace: bool,
    publication_id: str,
    donors: Donors = {},
) -> _Plan:
    previous = committed.entries if committed else {}
    entries: dict[str, ManifestEntry] = {} if replace else dict(previous)
    existing = {(e.sha256, e.size): e.published for e in previous.values()}
    files: list[tuple[str, bytes, str | None]] = []
    written: list[str] = []
    reused: list[str] = []
    for logical in sorted(artifacts):
        data = artifacts[logical]
        key = (_sha256(data), len(data))
        before = entries.get(logical)
        if before is not None and (before.sha256, before.size) == key:
            continue
        if key in existing:
            entries[logical] = ManifestEntry(published=existing[key], sha256=key[0], size=key[1])
            reused.append(logical)
            continue
        target_path = published_path(publication_id, len(files) + 1)
        files.append((target_path, data, donors.get(key)))
        existing[key] = target_path
        entries[logical] = ManifestEntry(published=target_path, sha256=key[0], size=key[1])
        written.append(logical)
    manifest = PublicationManifest(publication_id=publication_id, entries=dict(sorted(entries.items())))
    head = head_path(publication_id)
    directory = paths.publication_dir(publication_id)
    # Nothing reaches these writes before the head names them, so they share
    # one flush, the barrier just before the lease rotation that commits.
    ops: list[Operation] = [MakeDirs(paths.publications_dir, optional=True, deferred=True), MakeDirs(directory, deferred=True)]
    ops += [
        CreateLinked(paths.inside(p), data, source, deferred=True) if source else CreateExclusive(paths.inside(p), data, deferred=True)
        for p, data, source in files
    ]
    ops.append(CreateExclusive(f"{directory}/{MANIFEST_NAME}", encode_record(manifest), deferred=True))
    ops.append(Barrier())
    return _Plan(head, manifest, ops, 1, tuple(written), tuple(reused))
