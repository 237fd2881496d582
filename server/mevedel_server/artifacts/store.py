"""``ArtifactStore``: one workspace's artifact store, through its target.

Knows nothing of sessions beyond their ids (attaching is
:mod:`.attachments`' work) and nothing of LSP. Every change of an item's
bookkeeping holds the store lock (``.mevedel/leases/artifacts``) for its one
program and proves, inside it, what it read before (``Verify`` of the bytes),
so two server processes never interleave a change; a live item's write also
carries its lease proof (:mod:`.item_lease`).

Commit points, so a fresh reader sees an item whole or not at all:

- create: the authored files, the first version and its index are written
  and flushed, then ``meta.json`` (listing reads metadata, so an item
  without it is not there yet);
- whole-item write: one atomic replace of the primary file (then the
  metadata's ``updated_at``, display only);
- delete: ``meta.json`` goes first, then everything else of the item.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping

import msgspec

from ..store import ClientIdentity
from ..targets import (
    Barrier,
    Clock,
    ControlProgram,
    CreateExclusive,
    Entry,
    FileRead,
    ListDir,
    ListTree,
    MakeDirs,
    NewestIs,
    Operation,
    PathAbsentError,
    PutEntry,
    Read,
    ReadEntry,
    ReadFiles,
    ReadNewest,
    Remove,
    Replace,
    Stat,
    Status,
    Target,
    TargetError,
    UnsafePathError,
    Verify,
    WriteProject,
    raise_for_result,
)
from . import content as item_content
from .errors import ArtifactError, invalid, missing
from .file_facts import Facts, facts_ops, trusted_facts
from .item_lease import (
    DEFAULT_LEASE_SECONDS,
    HANDOVER_IDLE_SECONDS,
    ItemLeases,
    lease_view,
)
from .layout import (
    GENERATION_FAMILY,
    KINDS,
    LEASES_ROOT,
    LIVE_PRIMARY,
    LOCK_DIR,
    MAX_COMMENT_BYTES,
    STATE_ROOT,
    VERSION_FAMILY,
    ItemPaths,
    check_file_name,
    is_item_id,
    normalize_title,
)
from .records import (
    Comment,
    Discussion,
    ItemMeta,
    RecordRefused,
    VersionEntry,
    VersionIndex,
    VersionReason,
    decode_record,
    encode,
    load,
)
from .versions import (
    DEFAULT_MAX_VERSION_BYTES,
    DEFAULT_MAX_VERSIONS,
    HEAD_BYTES,
    Disproved,
    IndexView,
    drop_versions,
    first_version,
    load_index,
    newest_count,
    publish_version,
    read_for_version,
    read_index,
    read_version,
    sized_whole,
)

_log = logging.getLogger(__name__)
_ATTEMPTS = 16


class ItemSummary(msgspec.Struct, frozen=True):
    meta: ItemMeta
    versions: int
    #: Set while another process holds the item's live lease.
    holder_host: str | None = None
    #: That holder for people: its editor or process and its host.
    holder: str | None = None

    @property
    def item_id(self) -> str:
        return self.meta.id


class ItemContent(msgspec.Struct, frozen=True):
    meta: ItemMeta
    data: bytes
    revision: str
    comments: tuple[Comment, ...]
    #: Set while another process holds the item's live lease.
    holder_host: str | None = None
    #: That holder for people: its editor or process and its host.
    holder: str | None = None
    #: The primary file's facts taken just before ``data`` was read, set
    #: when a later write cannot leave them as they are
    #: (:mod:`.file_facts`): an item watch starts from them.
    facts: Facts | None = None

    @property
    def writable(self) -> bool:
        return self.holder_host is None


class Editor(msgspec.Struct, frozen=True):
    """Who writes: a session (attached by the caller) and its turn in
    flight, whose settlement records a version."""

    session_id: str | None = None
    turn: int | None = None


def revision_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_item_id(item_id: object) -> str:
    if not is_item_id(item_id):
        raise invalid(
            repr(item_id) if not isinstance(item_id, str) else item_id or "''",
            "is not an item id (1-80 letters, digits, '_' or '-', starting with a letter or digit)",
        )
    return item_id  # type: ignore[return-value]


def _target_refusal(authored: str, exc: TargetError) -> ArtifactError:
    if isinstance(exc, UnsafePathError):
        return ArtifactError(
            "containment", authored, "a path of the item is a symbolic link or not a regular file; mevedel follows no link and wrote nothing"
        )
    if isinstance(exc, PathAbsentError):
        return missing(authored)
    return ArtifactError("unavailable", authored, f"the workspace's storage refused: {exc}")


def _refusals(method):
    """Every target refusal reaching a caller is an :class:`ArtifactError`
    naming the item (or the title) it was about, never a path."""

    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        try:
            return await method(self, *args, **kwargs)
        except TargetError as exc:
            authored = args[0] if args and isinstance(args[0], str) else "artifact store"
            if method.__name__ == "create" and len(args) > 1:
                authored = str(args[1])
            raise _target_refusal(authored, exc) from None

    return wrapper


class _Saved(msgspec.Struct, frozen=True):
    """An item as a save of it read it (and the index it wrote)."""

    item_id: str
    primary: str
    meta_raw: bytes
    data: bytes
    #: The index it wrote and the name of the file that holds it (None
    #: until written).
    index: VersionIndex | None = None
    newest: str | None = None


class ArtifactStore:
    def __init__(
        self,
        target: Target,
        client: ClientIdentity,
        *,
        max_versions: int = DEFAULT_MAX_VERSIONS,
        max_version_bytes: int = DEFAULT_MAX_VERSION_BYTES,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        handover_idle_seconds: float = HANDOVER_IDLE_SECONDS,
        renew_every: float | None = None,
    ) -> None:
        self.target = target
        self.client = client
        self.max_versions = max_versions
        self.max_version_bytes = max_version_bytes
        self.leases = ItemLeases(
            target, client, duration_seconds=lease_seconds, idle_seconds=handover_idle_seconds, renew_every=renew_every
        )
        #: Called with (item id, reason) after every change made here.
        self.on_change: list[Callable[[str, str], None]] = []
        self.leases.on_change.append(self.notify)
        #: Items each session wrote during its turn in flight: one version
        #: each when the turn settles.
        self._turn_edits: dict[str, set[str]] = {}
        #: Each item's primary file name as last read: an item keeps its
        #: primary file for life, so a save reads the metadata beside the
        #: primary's bytes (one program) instead of before them.
        self._primaries: dict[str, str] = {}
        #: The item this store last saved a version of, as it then was: an
        #: editor's next save proves it unchanged in the publication itself.
        self._last_saved: _Saved | None = None
        #: Removals of the blobs publications dropped, which no caller
        #: waits for (see :func:`drop_versions`); ``close`` does.
        self._dropping: set[asyncio.Task[None]] = set()

    # Reading -------------------------------------------------------------------

    @_refusals
    async def list(self) -> list[ItemSummary]:
        """Every item, by title then id. An item whose metadata cannot be
        trusted is left out (and logged), never guessed."""
        listing = ListDir(STATE_ROOT, optional=True)
        leases = ListDir(LEASES_ROOT, optional=True)
        first = await self.target.run(ControlProgram([listing, leases]))
        if first[0].status is Status.ABSENT:
            return []
        raise_for_result(listing, first[0])
        ids = [name for name in first[0].value if is_item_id(name)]
        leased = set(first[1].value) & set(ids) if first[1].ok else set()
        names = [f"{item_id}/{leaf}" for item_id in ids for leaf in ("meta.json", "versions.json", "deleting")]
        reads: list = []
        pending = names
        views: dict[str, tuple[int, bytes]] = {}
        now = None
        lease_ops = [ReadNewest(ItemPaths(i).lease_dir, *GENERATION_FAMILY, optional=True) for i in sorted(leased)]
        # The start of each item's newest version file, as a reader of the
        # index reads it: a small item's whole (its count checked against
        # its bytes), a larger one's header (its size proved after).
        newest_ops = [ReadNewest(ItemPaths(i).versions_dir, *VERSION_FAMILY, optional=True, max_bytes=HEAD_BYTES) for i in ids]
        newest: dict[str, object] = {}
        while True:
            ops = [ReadFiles(STATE_ROOT, names=tuple(pending), max_bytes=1024 * 1024, budget=32 * 1024 * 1024)]
            if lease_ops:
                ops += [*lease_ops, Clock(LEASES_ROOT)]
            ops += newest_ops
            result = await self.target.run(ControlProgram(ops))
            raise_for_result(ops[0], result[0])
            got = result[0].value
            reads += got
            if lease_ops:
                for item_id, res in zip(sorted(leased), result[1 : 1 + len(lease_ops)]):
                    if res.ok:
                        views[item_id] = res.value
                clock = result[len(lease_ops) + 1]
                now = int(clock.value) if clock.ok else None
                lease_ops = []
            if newest_ops:
                newest = dict(zip(ids, list(result)[len(ops) - len(newest_ops) :]))
                newest_ops = []
            pending = pending[len(got) :]
            if not pending:
                break
        by_name = dict(zip(names, reads))
        counts = await self._version_counts(ids, newest, by_name)
        items: list[ItemSummary] = []
        interrupted: list[str] = []
        for item_id in ids:
            meta_read = by_name.get(f"{item_id}/meta.json")
            if meta_read is None or not meta_read.ok or meta_read.data is None:
                marker = by_name.get(f"{item_id}/deleting")
                if meta_read is not None and meta_read.status is Status.ABSENT and marker is not None and marker.ok:
                    interrupted.append(item_id)
                continue
            try:
                meta = _decode_meta(item_id, meta_read.data)
            except ArtifactError as exc:
                _log.warning("artifact store: %s", exc)
                continue
            count = counts.get(item_id, 0)
            holder = holder_text = None
            if item_id in views and now is not None:
                try:
                    view = lease_view(item_id, views[item_id], now)
                    holder, holder_text = self.leases.holder(view), self.leases.holder_text(view)
                except ArtifactError:
                    holder = None  # an untrustworthy lease names nobody
            items.append(ItemSummary(meta, count, holder, holder_text))
        items.sort(key=lambda s: (s.meta.title.casefold(), s.meta.title, s.meta.id))
        for item_id in interrupted:
            await self._finish_delete(item_id)
        return items

    async def _version_counts(self, ids: list[str], newest: dict, by_name: dict) -> dict[str, int]:
        """How many versions each listed item keeps: from the start of its
        newest version file (a larger one's size proved by a ``Stat``, all
        in one program) or, with none, its legacy index. A file found not
        whole has its index read apart; 0 when nothing can be trusted (the
        listing shows the item, not a guess)."""
        counts: dict[str, int] = {}
        sized: dict[str, tuple[int, int, str]] = {}
        unsettled: list[str] = []
        for item_id in ids:
            found = newest.get(item_id)
            if found is not None and found.ok:
                name, raw = found.value
                listed = newest_count(name, raw)
                if listed is None:
                    unsettled.append(item_id)
                elif listed.size is None:
                    counts[item_id] = listed.count
                else:
                    sized[item_id] = (listed.count, listed.size, name)
            elif found is not None and found.status is not Status.ABSENT:
                counts[item_id] = 0
            else:
                legacy = by_name.get(f"{item_id}/versions.json")
                try:
                    counts[item_id] = len(load_index(legacy.data, item_id).versions) if legacy is not None and legacy.ok else 0
                except ArtifactError:
                    counts[item_id] = 0
        if sized:
            stats = [Stat(f"{ItemPaths(i).versions_dir}/{name}", optional=True) for i, (_c, _s, name) in sized.items()]
            result = await self.target.run(ControlProgram(stats))
            for (item_id, (count, size, _name)), stat in zip(sized.items(), result):
                if sized_whole(stat, size):
                    counts[item_id] = count
                else:
                    unsettled.append(item_id)
        for item_id in unsettled:  # torn, or written meanwhile: rare
            try:
                counts[item_id] = len((await read_index(self.target, item_id)).index.versions)
            except (ArtifactError, TargetError) as exc:
                _log.warning("artifact store: versions of %s: %s", item_id, exc)
                counts[item_id] = 0
        return counts

    @_refusals
    async def meta(self, item_id: str) -> tuple[ItemMeta, bytes]:
        check_item_id(item_id)
        paths = ItemPaths(item_id)
        op = Read(paths.meta)
        result = (await self.target.run(ControlProgram([op])))[0]
        if result.status is Status.ABSENT:
            raise missing(item_id)
        raise_for_result(op, result)
        return _decode_meta(item_id, result.value), result.value

    @_refusals
    async def read(self, item_id: str, *, facts: bool = False) -> ItemContent:
        """The item whole; ``facts``: also the primary file's facts, for an
        editor's watch to start from (a clock probe, made and removed, and a
        ``Stat`` ahead of the bytes: a reader that keeps no watch need not
        write for them)."""
        check_item_id(item_id)
        meta, _ = await self.meta(item_id)
        paths = ItemPaths(item_id)
        path = paths.file(meta.primary)
        primary, discussion = Read(path), Read(paths.discussion, optional=True)
        # Its facts just before its bytes, so an editor's watch of it need
        # not read the bytes again until they change; who holds it after
        # them (a write takes the lease ahead of its bytes: new bytes never
        # pair with the lease from before them). One program: no round trip
        # of their own on an SSH workspace.
        observe = meta.kind in LIVE_PRIMARY and not self.leases.holds(item_id)
        lease_ops = self.leases.observe_ops(item_id) if observe else []
        taking = facts_ops(path) if facts else []
        result = await self.target.run(ControlProgram([*taking, primary, discussion, *lease_ops]))
        taken, result = trusted_facts(result[: len(taking)]) if taking else None, result[len(taking) :]
        raise_for_result(primary, result[0])
        comments = _decode_discussion(item_id, result[1].value if result[1].ok else None).comments
        holder = holder_text = None
        if observe:
            view = self.leases.observed(item_id, lease_ops, result)
            holder, holder_text = self.leases.holder(view), self.leases.holder_text(view)
        data = result[0].value
        return ItemContent(meta, data, revision_of(data), tuple(comments), holder, holder_text, taken)

    @_refusals
    async def versions(self, item_id: str) -> list[VersionEntry]:
        check_item_id(item_id)
        return list(reversed((await read_index(self.target, item_id)).index.versions))

    # Creating ------------------------------------------------------------------

    @_refusals
    async def create(
        self,
        kind: str,
        title: str,
        data: bytes | None = None,
        *,
        file_name: str | None = None,
        editor: Editor | None = None,
        files: Iterable[tuple[str, bytes]] = (),
        item_id: str | None = None,
        modes: Mapping[str, int] = {},
        directories: Mapping[str, int] = {},
    ) -> ItemSummary:
        """Create an item with one ``created`` version. ``files`` are
        secondary authored files (a duplicate's), by relative path;
        ``modes`` the permission bits of those files and of the primary
        (else an existing file's, or 0644), ``directories`` the directories
        below the item's (``""``: its own) with their bits, made even when
        empty (a duplicate's)."""
        if kind not in KINDS:
            raise invalid(repr(kind), "is not an item kind (document, whiteboard, artifact)")
        clean_title = normalize_title(title)
        if clean_title is None:
            raise invalid(repr(title), "is not a title (1-200 characters on one line: no newline, tab or other control character)")
        if kind == "artifact":
            if file_name is None:
                raise invalid("fileName", "an artifact needs its primary file name (such as report.md or chart.png)")
            why = check_file_name(file_name)
            if why:
                raise invalid(file_name, why)
            primary = file_name
        else:
            if file_name is not None and file_name != LIVE_PRIMARY[kind]:
                raise invalid(file_name, f"a {kind}'s primary file is always {LIVE_PRIMARY[kind]}")
            primary = LIVE_PRIMARY[kind]
        payload = item_content.default_content(kind) if data is None else data
        item_content.check_content(kind, primary, payload, clean_title)
        extra = [(name, blob) for name, blob in files if name != primary]
        for attempt in range(_ATTEMPTS):
            new_id = item_id or os.urandom(6).hex()
            check_item_id(new_id)
            now = await self._clock()
            meta = ItemMeta(id=new_id, kind=kind, title=clean_title, primary=primary, created_at=now, updated_at=now)
            created = await self._create(meta, payload, extra, editor, modes, directories)
            if created:
                self.notify(new_id, "created")
                return ItemSummary(meta, 1)
            if item_id is not None:
                raise ArtifactError("conflict", item_id, "an item with this id already exists")
        raise ArtifactError("unavailable", clean_title, "could not find a free item id")

    async def _create(
        self,
        meta: ItemMeta,
        payload: bytes,
        extra: list[tuple[str, bytes]],
        editor: Editor | None,
        modes: Mapping[str, int] = {},
        directories: Mapping[str, int] = {},
    ) -> bool:
        paths = ItemPaths(meta.id)
        entry = VersionEntry(
            number=1,
            at=meta.created_at,
            reason=VersionReason.CREATED,
            size=len(payload),
            sha256=revision_of(payload),
            session_id=editor.session_id if editor else None,
        )
        ops: list[Operation] = [
            MakeDirs(STATE_ROOT, optional=True),
            MakeDirs(paths.state),  # conflict: the id is taken
            MakeDirs(paths.authored, optional=True),
            MakeDirs(paths.versions_dir, optional=True),
        ]
        parents = sorted({name.rsplit("/", 1)[0] for name, _ in extra if "/" in name} | {d for d in directories if d})
        ops += [MakeDirs(paths.file(parent), optional=True) for parent in parents]

        def write(name: str, blob: bytes) -> Operation:
            mode = modes.get(name)
            if mode is None:
                return WriteProject(paths.file(name), blob, deferred=True)
            return PutEntry(paths.file(name), None, Entry.file(blob, mode), deferred=True)

        ops += [
            write(meta.primary, payload),
            *(write(name, blob) for name, blob in extra),
            # A directory's own bits last, deepest first: one the user made
            # read-only has received its files by then.
            *(
                PutEntry(paths.file(name) if name else paths.authored, Entry.directory(None), Entry.directory(mode), deferred=True)
                for name, mode in sorted(directories.items(), reverse=True)
            ),
            first_version(paths, entry, payload),
            Barrier(),
            CreateExclusive(paths.meta, encode(meta)),
        ]
        try:
            result = await self.target.run(ControlProgram(ops, lock=LOCK_DIR))
        except TargetError as exc:
            raise _target_refusal(meta.title, exc) from None
        if result.completed:
            return True
        stop = result.stopped_at
        if stop == 1 and result[1].status is Status.CONFLICT:
            return False
        # Nothing is listed without meta.json; take back what was written.
        await self._remove_state_dir(paths)
        try:
            raise_for_result(ops[stop], result[stop])
        except TargetError as exc:
            raise _target_refusal(meta.title, exc) from None
        return False

    @_refusals
    async def adopt(self, item_id: str, primary: str, *, editor: Editor | None = None) -> ItemSummary | None:
        """An authored file was written into a new id directory (a model's
        ApplyPatch): that creates the artifact, titled by its file name.
        None when the item exists already."""
        check_item_id(item_id)
        why = check_file_name(primary)
        if why:
            raise invalid(primary, why)
        paths = ItemPaths(item_id)
        op = Read(paths.file(primary))
        listing = ListDir(paths.versions_dir, optional=True)
        result = (await self.target.run(ControlProgram([Stat(paths.meta, optional=True), op, listing])))
        if result[0].ok:
            return None
        raise_for_result(op, result[1])
        # Version files a crashed create, adopt or delete left: removed
        # before the first one is written, and proved gone under the lock
        # (an older file left newest would be taken for the item's index).
        left = [name for name in (result[2].value if result[2].ok else ()) if not name.startswith(".")]
        now = await self._clock()
        meta = ItemMeta(id=item_id, kind="artifact", title=primary, primary=primary, created_at=now, updated_at=now)
        data = result[1].value
        # The created version is written in the same program, flushed before
        # the metadata that makes the item visible (as in ``create``): a
        # crash can never leave the item listed without it.
        entry = VersionEntry(
            number=1,
            at=now,
            reason=VersionReason.CREATED,
            size=len(data),
            sha256=revision_of(data),
            session_id=editor.session_id if editor else None,
            turn=editor.turn if editor else None,
        )
        # No metadata under the lock is what proves the id free: a state
        # directory without it is what a create, adopt or delete that
        # crashed left, and is taken over (its discussion dropped).
        ops: list[Operation] = [
            MakeDirs(STATE_ROOT, optional=True),
            Verify(paths.meta, None),
            MakeDirs(paths.state, optional=True),
            MakeDirs(paths.versions_dir, optional=True),
            Remove(paths.discussion, optional=True),
            Remove(paths.deleting, optional=True),
            Remove(paths.versions_index, optional=True),
            *(Remove(f"{paths.versions_dir}/{name}", optional=True) for name in left),
            NewestIs(paths.versions_dir, *VERSION_FAMILY, None),
            first_version(paths, entry, data),
            Barrier(),
            CreateExclusive(paths.meta, encode(meta)),
        ]
        res = await self.target.run(ControlProgram(ops, lock=LOCK_DIR))
        if not res.completed:
            if res.stopped_at == 1 and res[1].status is Status.MISMATCH:
                return None
            raise_for_result(ops[res.stopped_at], res[res.stopped_at])
        self.notify(item_id, "versioned")
        self.notify(item_id, "created")
        return ItemSummary(meta, 1)

    # Writing -------------------------------------------------------------------

    @_refusals
    async def write(
        self, item_id: str, data: bytes, *, base_revision: str | None = None, editor: Editor | None = None, reason: str = "written"
    ) -> str:
        """Replace the item's primary file (one whole-item write; a live
        item's is fenced by its lease). Returns the new revision."""
        check_item_id(item_id)
        async with self.leases.queue(item_id):
            return await self._write(item_id, data, base_revision, editor, reason)

    async def _write(self, item_id: str, data: bytes, base_revision: str | None, editor: Editor | None, reason: str) -> str:
        for _ in range(_ATTEMPTS):
            meta, meta_raw = await self.meta(item_id)
            paths = ItemPaths(item_id)
            item_content.check_content(meta.kind, meta.primary, data, item_id)
            current = None
            ops: list[Operation] = [Verify(paths.meta, meta_raw)]
            if base_revision is not None:
                read = Read(paths.file(meta.primary))
                got = (await self.target.run(ControlProgram([read])))[0]
                raise_for_result(read, got)
                current = got.value
                if revision_of(current) != base_revision:
                    raise ArtifactError("conflict", item_id, "the item changed since that revision was read; reload it and apply the change again")
                ops.append(Verify(paths.file(meta.primary), current))
            view = None
            create = None
            if meta.kind in LIVE_PRIMARY:
                view = await self.leases.observe(item_id)
                fence, create = self.leases.fence(view)
                ops += fence
            now = view.now if view is not None else await self._clock()
            fence_end = len(ops)
            new_meta = encode(msgspec.structs.replace(meta, updated_at=max(now, meta.created_at)))
            ops += [WriteProject(paths.file(meta.primary), data), Replace(paths.meta, new_meta)]
            result = await self.target.run(ControlProgram(ops, lock=LOCK_DIR))
            if result.completed:
                saved = self._last_saved
                if saved is not None and saved.item_id == item_id and saved.primary == meta.primary:
                    # What a save of it would read now: the bytes written here.
                    self._last_saved = msgspec.structs.replace(saved, meta_raw=new_meta, data=data)
                if create is not None:
                    self.leases.fenced(item_id, create, result[ops.index(create)])
                self._note_edit(item_id, editor)
                self.notify(item_id, reason)
                return revision_of(data)
            stop = result.stopped_at
            if stop == 0:
                if result[0].status is Status.ABSENT:
                    raise missing(item_id)
                continue  # the metadata changed meanwhile: read again
            if base_revision is not None and stop == 1:
                raise ArtifactError("conflict", item_id, "the item changed since that revision was read; reload it and apply the change again")
            if view is not None and stop < fence_end and result[stop].status in (Status.MISMATCH, Status.CONFLICT):
                raise self.leases.refused(view)
            raise_for_result(ops[stop], result[stop])
        raise ArtifactError("unavailable", item_id, "the item kept changing while writing; try again")

    @_refusals
    async def hold(self, item_id: str) -> None:
        """Take the lease of a live item (a document, a whiteboard) before
        its files are written by other means than :meth:`write` (an
        ApplyPatch of ``.mevedel/artifacts/ID/``), or refuse ``item-held``
        naming the process that edits it. An artifact (no lease) or an item
        not made yet (the write creates it) needs nothing."""
        check_item_id(item_id)
        try:
            meta, _raw = await self.meta(item_id)
        except ArtifactError as error:
            if error.kind == "missing-target":
                return
            raise
        if meta.kind not in LIVE_PRIMARY:
            return
        async with self.leases.queue(item_id):
            await self.leases.take(item_id)

    @_refusals
    async def restore(self, item_id: str, number: int, *, editor: Editor | None = None) -> str:
        """Write version ``number``'s bytes as an ordinary write, then record
        a ``restored`` version. The content it replaces is recorded first (a
        ``replaced`` version) unless the latest version already holds it, so
        the restore itself can be undone; the write names the revision that
        version holds, so a write landing in between is refused
        (``conflict``), never lost."""
        check_item_id(item_id)
        _, data = await read_version(self.target, item_id, number)
        async with self.leases.queue(item_id):
            current = await self._keep_replaced(item_id, editor)
            revision = await self._write(item_id, data, revision_of(current), editor, "restored")
        await self._publish(item_id, data, VersionReason.RESTORED, editor)
        return revision

    async def _keep_replaced(self, item_id: str, editor: Editor | None) -> bytes:
        """Record the item's current content as a ``replaced`` version
        unless the latest version holds exactly it; answers that content.
        An item another process holds is refused here, before anything is
        recorded (the restore could not write it)."""
        meta, _ = await self.meta(item_id)
        if meta.kind in LIVE_PRIMARY and not self.leases.holds(item_id):
            self.leases.fence(await self.leases.observe(item_id))  # raises item-held
        op = Read(ItemPaths(item_id).file(meta.primary))
        result = (await self.target.run(ControlProgram([op])))[0]
        raise_for_result(op, result)
        current = result.value
        index = (await read_index(self.target, item_id)).index
        if not index.versions or index.versions[-1].sha256 != revision_of(current):
            await self._publish(item_id, current, VersionReason.REPLACED, editor)
        return current

    # Versions ------------------------------------------------------------------

    @_refusals
    async def save_version(self, item_id: str, *, editor: Editor | None = None) -> VersionEntry:
        check_item_id(item_id)
        saved = self._last_saved
        if saved is not None and saved.item_id == item_id:
            # Saved (or written) here last: the metadata, the primary's
            # bytes and the index as they were then, proved under the store
            # lock in the publication itself -- one program (round trip)
            # when nothing else changed them. Primary bytes written
            # elsewhere come back with the refused proof: a second program
            # publishes them. Changed metadata: the item is read again.
            paths = ItemPaths(item_id)
            assert saved.index is not None and saved.newest is not None  # set once published
            known = IndexView(saved.index, saved.newest)
            for _ in range(2):
                proofs = (Verify(paths.meta, saved.meta_raw), Verify(paths.file(saved.primary), saved.data))
                outcome = await self._publish(item_id, saved.data, VersionReason.SAVED, editor, known=known, proofs=proofs, saved=saved)
                if isinstance(outcome, VersionEntry):
                    return outcome
                if outcome.proof != 1 or outcome.actual is None:
                    break
                saved = msgspec.structs.replace(saved, data=outcome.actual)
        # The metadata, the bytes and the index in one program, then the
        # publication: two programs (round trips on SSH). The primary's
        # name comes from the last read of the item; a wrong or unknown one
        # costs the read again under the name the metadata gives.
        primary = self._primaries.get(item_id)
        if primary is None:
            primary = (await self.meta(item_id))[0].primary
        for _ in range(2):
            read = await read_for_version(self.target, item_id, primary)
            meta = _decode_meta(item_id, read.meta_raw)
            self._primaries[item_id] = meta.primary
            if meta.primary == primary:
                break
            primary = meta.primary
        if read.data is None or meta.primary != primary:
            raise PathAbsentError(ItemPaths(item_id).file(meta.primary), "does not exist")
        saved = _Saved(item_id, primary, read.meta_raw, read.data)
        entry = await self._publish(item_id, read.data, VersionReason.SAVED, editor, known=read.view, saved=saved)
        assert isinstance(entry, VersionEntry)  # no proofs to refuse
        return entry

    async def _publish(
        self,
        item_id: str,
        data: bytes,
        reason: VersionReason,
        editor: Editor | None,
        *,
        known: IndexView | None = None,
        proofs: tuple[Verify, ...] = (),
        saved: _Saved | None = None,
    ) -> VersionEntry | Disproved:
        """Publish a version, unless one of ``proofs`` does not hold.
        ``saved``: the item as read for it, remembered once published."""
        self._last_saved = None
        published = await publish_version(
            self.target,
            item_id,
            data,
            reason=reason,
            max_count=self.max_versions,
            max_bytes=self.max_version_bytes,
            session_id=editor.session_id if editor else None,
            turn=editor.turn if editor else None,
            known=known,
            proofs=proofs,
        )
        if isinstance(published, Disproved):
            return published
        if published.dropped or published.legacy_index:
            removal = asyncio.ensure_future(self._drop(item_id, published.dropped, published.legacy_index))
            self._dropping.add(removal)
            removal.add_done_callback(self._dropping.discard)
        if saved is not None:
            self._last_saved = msgspec.structs.replace(saved, index=published.index, newest=published.newest)
        self.notify(item_id, "versioned")
        return published.entry

    def _note_edit(self, item_id: str, editor: Editor | None) -> None:
        if editor is not None and editor.session_id is not None and editor.turn is not None:
            self._turn_edits.setdefault(editor.session_id, set()).add(item_id)

    def note_edit(self, item_id: str, editor: Editor) -> None:
        """An item was written outside :meth:`write` (a model's ApplyPatch of
        an authored file) during ``editor``'s turn."""
        self._note_edit(item_id, editor)

    @_refusals
    async def settle_turn(self, session_id: str, turn: int) -> list[VersionEntry]:
        """The session's turn settled: one ``turn`` version of every item it
        wrote, from the committed bytes."""
        edited = sorted(self._turn_edits.pop(session_id, ()))
        published = []
        for item_id in edited:
            try:
                item = await self.read(item_id)
                published.append(
                    await self._publish(item_id, item.data, VersionReason.TURN, Editor(session_id, turn))
                )
            except ArtifactError as exc:
                _log.info("no turn version of %s: %s", item_id, exc)
        return published

    # Discussion ------------------------------------------------------------------

    @_refusals
    async def comment(self, item_id: str, text: str, *, author: str = "user", routed_to: str | None = None) -> Comment:
        check_item_id(item_id)
        if not isinstance(text, str) or not text.strip():
            raise invalid("text", "is blank; a comment needs words")
        if len(text.encode("utf-8", "replace")) > MAX_COMMENT_BYTES:
            raise invalid("text", f"is longer than {MAX_COMMENT_BYTES} bytes")
        at = await self._clock()

        def append(comments: list[Comment]) -> list[Comment]:
            number = comments[-1].number + 1 if comments else 1
            return [*comments, Comment(number=number, at=at, author=author, text=text, session_id=routed_to)]

        written = await self._change_discussion(item_id, append)
        assert written is not None  # append always changes the discussion
        self.notify(item_id, "commented")
        return written[-1]

    @_refusals
    async def discussions(self, item_ids: Iterable[str]) -> dict[str, tuple[ItemMeta, list[Comment]]]:
        """The metadata and comments of several items in one pass (as many
        programs as the read budget needs, not one per item); an item that
        is gone or cannot be trusted is left out (and logged)."""
        ids = sorted({i for i in item_ids if is_item_id(i)})
        names = [f"{item_id}/{leaf}" for item_id in ids for leaf in ("meta.json", "discussion.json")]
        reads: list[FileRead] = []
        while len(reads) < len(names):
            op = ReadFiles(STATE_ROOT, names=tuple(names[len(reads) :]), max_bytes=4 * 1024 * 1024, budget=32 * 1024 * 1024)
            result = (await self.target.run(ControlProgram([op])))[0]
            if result.status is Status.ABSENT:
                return {}
            raise_for_result(op, result)
            if not result.value:
                break  # nothing more to read: never loop on an empty answer
            reads += result.value
        found: dict[str, tuple[ItemMeta, list[Comment]]] = {}
        for number, item_id in enumerate(ids[: len(reads) // 2]):
            meta_read, talk_read = reads[2 * number], reads[2 * number + 1]
            if not meta_read.ok or meta_read.data is None:
                continue
            try:
                meta = _decode_meta(item_id, meta_read.data)
                talk = talk_read.data if talk_read.ok else None
                if talk_read.status is not Status.ABSENT and talk is None:
                    raise ArtifactError("unreadable", item_id, f"its discussion cannot be read ({talk_read.reason or 'too big'})")
                found[item_id] = (meta, _decode_discussion(item_id, talk).comments)
            except ArtifactError as exc:
                _log.warning("artifact store: %s", exc)
        return found

    @_refusals
    async def mark_delivered(self, item_id: str, numbers: Iterable[int], turn: int) -> None:
        """Comments ``numbers`` reached their session's agent in ``turn``
        (one already marked keeps its first turn)."""
        check_item_id(item_id)
        wanted = set(numbers)

        def mark(comments: list[Comment]) -> list[Comment] | None:
            if not any(c.number in wanted and c.delivered_in is None for c in comments):
                return None
            return [
                msgspec.structs.replace(c, delivered_in=turn) if c.number in wanted and c.delivered_in is None else c
                for c in comments
            ]

        if await self._change_discussion(item_id, mark) is not None:
            self.notify(item_id, "delivered")  # a discussion on screen shows it

    async def _read_discussion(self, item_id: str) -> tuple[list[Comment], bytes | None]:
        paths = ItemPaths(item_id)
        result = await self.target.run(ControlProgram([Stat(paths.meta), Read(paths.discussion, optional=True)]))
        if result[0].status is Status.ABSENT:
            raise missing(item_id)
        raw = result[1].value if result[1].ok else None
        return _decode_discussion(item_id, raw).comments, raw

    async def _change_discussion(
        self, item_id: str, change: Callable[[list[Comment]], list[Comment] | None]
    ) -> list[Comment] | None:
        """Replace the discussion with ``change(comments)`` (``None``: leave
        it), verified against the bytes it was computed from: a comment
        written meanwhile makes it compute again. Answers what was written."""
        paths = ItemPaths(item_id)
        for _ in range(_ATTEMPTS):
            comments, raw = await self._read_discussion(item_id)
            changed = change(comments)
            if changed is None:
                return None
            ops = [Stat(paths.meta), Verify(paths.discussion, raw), Replace(paths.discussion, encode(Discussion(comments=changed)))]
            res = await self.target.run(ControlProgram(ops, lock=LOCK_DIR))
            if res.completed:
                return changed
            if res.stopped_at == 0 and res[0].status is Status.ABSENT:
                raise missing(item_id)
            if res.stopped_at == 1 and res[1].status is Status.MISMATCH:
                continue
            raise_for_result(ops[res.stopped_at], res[res.stopped_at])
        raise ArtifactError("unavailable", item_id, "the discussion kept changing; try again")

    # Dedicated session -------------------------------------------------------------

    @_refusals
    async def set_dedicated_session(self, item_id: str, session_id: str | None, *, expected: str | None) -> bool:
        """Name the item's dedicated session, when it still names
        ``expected`` (the creator that loses a race opens the winner's)."""
        for _ in range(_ATTEMPTS):
            meta, raw = await self.meta(item_id)
            if meta.dedicated_session != expected:
                return False
            paths = ItemPaths(item_id)
            new = msgspec.structs.replace(meta, dedicated_session=session_id)
            ops = [Verify(paths.meta, raw), Replace(paths.meta, encode(new))]
            res = await self.target.run(ControlProgram(ops, lock=LOCK_DIR))
            if res.completed:
                return True
            if res[0].status is Status.ABSENT:
                raise missing(item_id)
        return False

    # Duplicating and deleting ------------------------------------------------------

    @_refusals
    async def duplicate(self, item_id: str, title: str | None = None, *, editor: Editor | None = None) -> ItemSummary:
        item = await self.read(item_id)
        files = await self._authored_files(item_id)
        modes, directories = await self._authored_modes(item_id)
        copy_title = title if title is not None else f"{item.meta.title} (copy)"[:200]
        return await self.create(
            item.meta.kind,
            copy_title,
            item.data,
            file_name=item.meta.primary if item.meta.kind == "artifact" else None,
            editor=editor,
            files=[(name, blob) for name, blob in files if name != item.meta.primary],
            modes=modes,
            directories=directories,
        )

    async def _authored_modes(self, item_id: str) -> tuple[dict[str, int], dict[str, int]]:
        """The permission bits of an item's authored files, and of its
        directories (its own as ``""``), by relative path: what a duplicate
        keeps. A path that changed kind or went away meanwhile is left out."""
        paths = ItemPaths(item_id)
        op = ListTree(paths.authored, optional=True)
        listing = (await self.target.run(ControlProgram([op])))[0]
        if listing.status is Status.ABSENT:
            return {}, {}
        raise_for_result(op, listing)
        names: list[str] = []
        directories: list[str] = []
        for parent, joined in listing.value.records:
            directories.append(parent)
            names += [f"{parent}/{name}" if parent else name for name in (joined.split("\0") if joined else ()) if not name.endswith("/")]
        wanted = [(name, Entry.FILE) for name in names] + [(name, Entry.DIRECTORY) for name in directories]
        reads = [ReadEntry(paths.file(name) if name else paths.authored, max_bytes=0, optional=True) for name, _ in wanted]
        results = await self.target.run(ControlProgram(reads))
        modes: dict[str, int] = {}
        bits: dict[str, int] = {}
        for (name, kind), read in zip(wanted, results):
            if read.ok and read.value.kind == kind and read.value.mode is not None:
                (modes if kind == Entry.FILE else bits)[name] = read.value.mode
        return modes, bits

    async def _authored_files(self, item_id: str) -> list[tuple[str, bytes]]:
        paths = ItemPaths(item_id)
        names = await self._tree_files(paths.authored)
        if not names:
            return []
        op = ReadFiles(paths.authored, names=tuple(names), budget=256 * 1024 * 1024)
        result = (await self.target.run(ControlProgram([op])))[0]
        raise_for_result(op, result)
        return [(name, read.data) for name, read in zip(names, result.value) if read.ok and read.data is not None]

    async def _tree_files(self, directory: str) -> list[str]:
        """Regular files below ``directory`` (relative), no link followed."""
        op = ListTree(directory, optional=True)
        result = (await self.target.run(ControlProgram([op])))[0]
        if result.status is Status.ABSENT:
            return []
        raise_for_result(op, result)
        files = []
        for parent, joined in result.value.records:
            for name in joined.split("\0") if joined else ():
                if not name.endswith("/"):
                    files.append(f"{parent}/{name}" if parent else name)
        return files

    async def _tree_dirs(self, directory: str) -> list[str]:
        op = ListTree(directory, optional=True)
        result = (await self.target.run(ControlProgram([op])))[0]
        if result.status is Status.ABSENT:
            return []
        raise_for_result(op, result)
        return [parent for parent, _ in result.value.records if parent]

    @_refusals
    async def delete(self, item_id: str) -> ItemMeta:
        """Remove the item's authored files, versions, discussion and lease
        (the dedicated session is the caller's). ``meta.json`` goes first:
        from then on the item is not listed."""
        check_item_id(item_id)
        async with self.leases.queue(item_id):
            return await self._delete(item_id)

    async def _delete(self, item_id: str) -> ItemMeta:
        meta, raw = await self.meta(item_id)
        paths = ItemPaths(item_id)
        # A live item another process is editing is not deleted behind its
        # back: its lease is read, a live foreign holder refuses the delete
        # (naming it), and the program proves under the store lock that no
        # generation was written since.
        fence: list[Operation] = []
        view = None
        if meta.kind in LIVE_PRIMARY:
            view = await self.leases.observe(item_id)
            self.leases.fence(view)  # raises item-held / item-lease-lost; runs nothing
            n = view.generation
            fence = [Verify(paths.generation(n), view.raw), Verify(paths.generation(n + 1), None)] if n else [Verify(paths.generation(1), None)]
        # A planted link as the primary file fails the delete, as it fails
        # every other operation (docs/artifacts.md): nothing is unlinked.
        primary = Stat(paths.file(meta.primary), optional=True)
        found = (await self.target.run(ControlProgram([primary])))[0]
        if found.unsafe or (found.ok and found.value.kind != "file"):
            raise ArtifactError(
                "containment", item_id,
                f"its primary file {meta.primary} is {found.reason or 'not a regular file'}; mevedel follows no link in the store, "
                "so nothing was deleted (remove the link yourself)",
            )
        # The marker first, then meta.json (the commit point): a delete
        # interrupted past it is finished by the next listing.
        ops: list[Operation] = [Verify(paths.meta, raw), *fence, Replace(paths.deleting, b""), Remove(paths.meta)]
        ops += await self._removals(paths)
        res = await self.target.run(ControlProgram(ops, lock=LOCK_DIR))
        if not res.completed:
            stop = res.stopped_at
            if stop == 0 and res[0].status is Status.ABSENT:
                raise missing(item_id)
            if stop == 0 and res[0].status is Status.MISMATCH:
                raise ArtifactError("conflict", item_id, "the item changed while deleting it; nothing was deleted, try again")
            if view is not None and stop <= len(fence) and res[stop].status in (Status.MISMATCH, Status.CONFLICT):
                raise self.leases.refused(view)
            raise_for_result(ops[stop], res[stop])
        self.leases.forget(item_id)
        self.notify(item_id, "deleted")
        return meta

    async def _removals(self, paths: ItemPaths) -> list[Operation]:
        """Everything of the item, deepest first; the deletion marker and
        the state directory last."""
        ops: list[Operation] = []
        for root in (paths.authored, paths.lease_dir, paths.state):
            files = [name for name in await self._tree_files(root) if f"{root}/{name}" != paths.deleting]
            dirs = await self._tree_dirs(root)
            ops += [Remove(f"{root}/{name}", optional=True) for name in files]
            ops += [Remove(f"{root}/{name}", optional=True) for name in sorted(dirs, key=len, reverse=True)]
            if root == paths.state:
                ops.append(Remove(paths.deleting, optional=True))
            ops.append(Remove(root, optional=True))
        return ops

    async def _finish_delete(self, item_id: str) -> None:
        """Finish a delete that was interrupted after its commit point (the
        marker is there and ``meta.json`` is not, proven under the lock)."""
        paths = ItemPaths(item_id)
        ops: list[Operation] = [Verify(paths.meta, None), Stat(paths.deleting), *await self._removals(paths)]
        try:
            result = await self.target.run(ControlProgram(ops, lock=LOCK_DIR))
        except TargetError as exc:
            _log.warning("finishing the interrupted delete of %s failed: %s", item_id, exc)
            return
        if result.completed:
            _log.info("finished the interrupted delete of artifact %s", item_id)

    async def _remove_state_dir(self, paths: ItemPaths) -> None:
        files = await self._tree_files(paths.state)
        dirs = await self._tree_dirs(paths.state)
        ops: list[Operation] = [Remove(f"{paths.state}/{n}", optional=True) for n in files]
        ops += [Remove(f"{paths.state}/{d}", optional=True) for d in sorted(dirs, key=len, reverse=True)]
        ops.append(Remove(paths.state, optional=True))
        await self.target.run(ControlProgram(ops, lock=LOCK_DIR))

    # Leases ------------------------------------------------------------------------

    @_refusals
    async def request_handover(self, item_id: str) -> ItemSummary:
        meta, _ = await self.meta(item_id)
        if meta.kind not in LIVE_PRIMARY:
            raise ArtifactError("invalid-params", item_id, "an artifact has no lease; write it with its base revision")
        view = await self.leases.observe(item_id)
        holder = self.leases.holder(view)
        if holder is not None:
            await self.leases.request_handover(item_id)
        index = (await read_index(self.target, item_id)).index
        return ItemSummary(meta, len(index.versions), holder, self.leases.holder_text(view))

    async def _drop(self, item_id: str, numbers: tuple[int, ...], legacy_index: bool = False) -> None:
        try:
            await drop_versions(self.target, item_id, numbers, legacy_index=legacy_index)
        except Exception as exc:  # a later save that reads the item removes them
            _log.info("dropped versions of %s not removed yet: %s", item_id, exc)

    async def removals_done(self) -> None:
        """Wait for the removals of the version blobs that publications
        made so far dropped."""
        while self._dropping:
            await asyncio.gather(*self._dropping)

    async def close(self) -> None:
        await self.removals_done()
        await self.leases.close()

    # Helpers -----------------------------------------------------------------------

    async def _clock(self) -> int:
        ops = [MakeDirs(LEASES_ROOT, optional=True), Clock(LEASES_ROOT)]
        result = await self.target.run(ControlProgram(ops))
        raise_for_result(ops[1], result[1])
        return int(result[1].value)

    def notify(self, item_id: str, reason: str) -> None:
        for listener in list(self.on_change):
            try:
                listener(item_id, reason)
            except Exception:
                _log.exception("artifact change listener failed")


def _decode_meta(item_id: str, raw: bytes) -> ItemMeta:
    try:
        meta = decode_record(ItemMeta, raw, f"metadata of {item_id}")
    except RecordRefused as exc:
        raise ArtifactError("unreadable", item_id, f"its metadata cannot be trusted ({exc.reason})") from None
    if meta.id != item_id:
        raise ArtifactError("unreadable", item_id, f"its metadata names another item ({meta.id})")
    return meta


def _decode_discussion(item_id: str, raw: bytes | None) -> Discussion:
    return load(Discussion, raw, item_id, "discussion")

